import { Argument, type Command } from 'commander';
import type { CoordinatorAdmin, SchedulePage, ScheduleTarget } from '@redis-stream-coordinator/core';
import { integer } from '../args';
import { UsageError } from '../connection';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { duration, type Printer, table } from '../output';

interface ScheduleOptions {
  group?: string;
  count: number;
  after?: string;
  yes?: boolean;
}

const clip = (text: string | undefined, width: number) =>
  text === undefined ? undefined : text.length > width ? `${text.slice(0, width - 1)}…` : text;

function which(target: ScheduleTarget): string {
  return target.consumerGroup === undefined
    ? `delayed entries of shard ${target.shardIndex} of stream ${target.streamPrefix}`
    : `deferred retries of group ${target.consumerGroup} on shard ${target.shardIndex} of stream ${target.streamPrefix}`;
}

function renderPage(page: SchedulePage, target: ScheduleTarget): string {
  const head = `${which(target)}: ${page.total} waiting`;
  if (page.entries.length === 0) return `${head}${page.total > 0 ? ' (none after --after)' : ''}`;
  const rows = table(
    ['ID', 'DUE AT', 'DUE IN', 'KEY', ...(target.consumerGroup === undefined ? [] : ['ATTEMPTS']), 'PAYLOAD'],
    page.entries.map((e) => [
      e.id,
      // Due already and waiting to move to its key's shard after a resize: its place in the moves, no time.
      e.dueAt === null ? `waiting for move ${e.waitingForMove}` : new Date(e.dueAt).toISOString(),
      e.dueInMs === null ? '' : e.dueInMs > 0 ? duration(e.dueInMs) : `due ${duration(-e.dueInMs)} ago`,
      e.key,
      ...(target.consumerGroup === undefined ? [] : [e.attempts]),
      clip(e.payloadText, 60),
    ]),
  );
  return `${head}\n${rows}${page.next === null ? '' : `\n(more: --after ${page.next})`}`;
}

/** Entries of the same key the change took along (deferredOrder 'key': a deferral and its parked entries). */
function withKey(count: number, what: string): string {
  return count > 0 ? `; ${count} ${count === 1 ? 'entry' : 'entries'} of its key ${what}` : '';
}

async function act(
  admin: CoordinatorAdmin,
  target: ScheduleTarget,
  action: string,
  id: string | undefined,
  options: ScheduleOptions,
  json: boolean,
  out: Printer,
) {
  switch (action) {
    case 'list': {
      const page = await admin.readSchedule(target, {
        count: options.count,
        ...(options.after === undefined ? {} : { after: options.after }),
      });
      return json ? out.json(page) : out.print(renderPage(page, target));
    }
    case 'release': {
      const result = await admin.releaseScheduled(target, id!);
      if (json) out.json(result);
      else if (result.madeDue)
        out.print(
          `${id} is due now (was due ${new Date(result.previousDueAt!).toISOString()})${withKey(result.keyEntriesMadeDue, 'made due with it, in order')}: the shard's owner releases it in its next turn`,
        );
      else if (result.waitingToMove)
        out.print(`${id} is due and waits to move to its key's shard after a resize: the shard's owner moves it in its next turn`);
      else if (result.found)
        out.print(
          `${id} was due already (${new Date(result.previousDueAt!).toISOString()}): the shard's owner releases it in its next turn`,
        );
      if (!result.found) throw new Error(`${id} is not among the ${which(target)} (released or dropped already?)`);
      return;
    }
    case 'drop': {
      const result = await admin.dropScheduled(target, id!);
      if (json) out.json(result);
      else if (result.dropped)
        out.print(
          `dropped ${id} (was due ${new Date(result.dueAt!).toISOString()}): it will not be handled${withKey(result.parkedMadeDue, 'parked behind it made due now, in order')}`,
        );
      if (!result.dropped) throw new Error(`${id} is not among the ${which(target)} (released or dropped already?)`);
      return;
    }
  }
}

/** `rsc schedule <prefix> <shard> list|release|drop [id] [--group g]`. */
export function registerSchedule(program: Command, io: RscIo): void {
  program
    .command('schedule')
    .description("list a shard's delayed entries (or, with --group, a group's deferred retries on it); make one due now, or drop it")
    .argument('<prefix>', 'stream prefix')
    .argument('<shard>', 'shard index', integer('shardIndex'))
    .addArgument(new Argument('<action>', 'what to do').choices(['list', 'release', 'drop']))
    .argument('[id]', 'release, drop: the entry, by the ID that list shows')
    .option('--group <group>', "a consumer group's deferred retries instead of the shard's delayed entries")
    .option('-n, --count <n>', 'list: at most this many', integer('admin.readSchedule.count'), 100)
    .option('--after <cursor>', 'list: the page after the one that printed this cursor')
    .option('--yes', 'drop: yes, remove it for good (it is never handled)')
    .action((prefix: string, shard: number, action: string, id: string | undefined, options: ScheduleOptions, command: Command) => {
      if (action !== 'list' && id === undefined)
        throw new UsageError(`${action} needs the entry's ID (rsc schedule ${prefix} ${shard} list shows them)`);
      if (action === 'list' && id !== undefined) throw new UsageError('list takes no ID (page with --after)');
      if (action === 'drop' && !options.yes)
        throw new UsageError(`drop removes ${id} for good (it is never handled): run again with --yes to drop it`);
      const target: ScheduleTarget = {
        streamPrefix: prefix,
        shardIndex: shard,
        ...(options.group === undefined ? {} : { consumerGroup: options.group }),
      };
      return withAdmin(command, io, ({ admin, json, out }) => act(admin, target, action, id, options, json, out));
    });
}
