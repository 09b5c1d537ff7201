import type { Command } from 'commander';
import type { GroupEvent } from '@redis-stream-coordinator/core';
import { integer } from '../args';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { table } from '../output';

const row = (e: GroupEvent) => [e.at, e.type, e.memberId, e.groupEpoch, e.assignmentEpoch, e.detail];
const HEADERS = ['TIME', 'TYPE', 'MEMBER', 'GROUP EPOCH', 'ASSIGNMENT EPOCH', 'DETAIL'];
/** ISO time, the longest event type (MEMBER_WEIGHT_CHANGED), a UUID: rows printed later line up. */
const WIDTHS = [24, 21, 36];

/** `rsc events <prefix> <group> [--follow]`. */
export function registerEvents(program: Command, io: RscIo): void {
  program
    .command('events')
    .description("the group's event log (joins, leaves, expiries, targets, handoffs); --json prints one event per line")
    .argument('<prefix>', 'stream prefix')
    .argument('<group>', 'consumer group')
    .option('-f, --follow', 'keep printing new events until Ctrl-C')
    .option('-n, --count <n>', 'how many of the newest events to show first', integer('admin.readGroupEvents.count'), 50)
    .action((prefix: string, group: string, options: { follow?: boolean; count: number }, command: Command) =>
      withAdmin(command, io, async (context) => {
        const { admin, json, out } = context;
        const first = await admin.readGroupEvents(prefix, group, { count: options.count });
        if (json) for (const event of first) out.jsonLine(event);
        else out.print(first.length === 0 && !options.follow ? 'no events' : table(HEADERS, first.map(row), WIDTHS));
        if (!options.follow) return;
        let after = first.at(-1)?.id ?? '0-0';
        while (!context.isStopped()) {
          // Blocks a second at most, so Ctrl-C is honoured soon.
          const next = await admin.readGroupEvents(prefix, group, { after, blockMs: 1000, count: 1000 });
          for (const event of next) {
            if (json) out.jsonLine(event);
            else out.print(table(HEADERS, [row(event)], WIDTHS).split('\n')[1]);
          }
          after = next.at(-1)?.id ?? after;
        }
      }),
    );
}
