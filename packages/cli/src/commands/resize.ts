import type { Command } from 'commander';
import type { GroupCutoverStatus } from '@redis-stream-coordinator/core';
import { integer } from '../args';
import { pause, withAdmin } from '../context';
import type { RscIo } from '../io';
import { duration } from '../output';

function progress(status: GroupCutoverStatus): string {
  if (!status.cutover) return `group ${status.consumerGroup}: reads every shard`;
  if (status.completed) return `group ${status.consumerGroup}: cutover complete`;
  const waiting = (status.waitingFor ?? []).map(
    (w) =>
      `${w.shardIndex} (${[w.undelivered && 'undelivered', w.pending && 'pending', w.scheduled && 'scheduled'].filter(Boolean).join(', ')})`,
  );
  return (
    `group ${status.consumerGroup}: cutover ${status.cutover.from} -> ${status.cutover.to} shards, grace ${duration(status.graceLeftMs)} left` +
    (waiting.length > 0 ? `, waiting for shards ${waiting.join(', ')} to be processed` : '')
  );
}

/** `rsc resize <prefix> <n> [--unordered]` with the cutover's progress until it completes. */
export function registerResize(program: Command, io: RscIo): void {
  program
    .command('resize')
    .description("change a stream's shard count while it runs, then show each group's cutover until it completes")
    .argument('<prefix>', 'stream prefix')
    .argument('<n>', 'new shard count', integer('shardCount'))
    .option('--unordered', 'do not keep per-key order across the resize (new shards readable at once)')
    .option('--grace-ms <ms>', 'how long producers may still write with the old count', integer('admin.resizeShards.graceMs'))
    .option('--no-wait', 'return after the resize; do not follow the cutover')
    .option('--timeout <s>', 'stop following the cutover after this many seconds (exit 1; the resize stays)', integer('rsc.resize.timeout'))
    .action(
      (
        prefix: string,
        count: number,
        options: { unordered?: boolean; graceMs?: number; wait: boolean; timeout?: number },
        command: Command,
      ) =>
        withAdmin(command, io, async (context) => {
          const { admin, json, out } = context;
          const result = await admin.resizeShards(prefix, count, { ordered: !options.unordered, graceMs: options.graceMs });
          if (!json) {
            out.print(
              result.changed
                ? `stream ${prefix}: ${result.previousShardCount} -> ${result.shardCount} shards (metadataVersion ${result.metadataVersion}, ${options.unordered ? 'unordered' : 'ordered'})`
                : `stream ${prefix}: already has ${result.shardCount} shards; nothing changed`,
            );
          }
          const deadline = options.timeout === undefined ? Infinity : Date.now() + options.timeout * 1000;
          let statuses = await admin.completeCutovers(prefix);
          let last = '';
          while (options.wait && statuses.some((s) => s.cutover && !s.completed) && !context.isStopped()) {
            const lines = statuses.map(progress).join('\n');
            if (!json && lines !== last) out.print(lines);
            last = lines;
            if (Date.now() > deadline) {
              throw new Error(
                `stream ${prefix}: the cutover has not completed after ${options.timeout} s (the resize stays in effect; rsc describe shows what the groups wait for)`,
              );
            }
            await pause(context, 500);
            statuses = await admin.completeCutovers(prefix);
          }
          const done = statuses.every((s) => !s.cutover || s.completed);
          if (json) return out.json({ ...result, cutovers: statuses, cutoverComplete: done });
          if (done) out.print(statuses.length === 0 ? 'no consumer groups: nothing to cut over' : statuses.map(progress).join('\n'));
          else out.print('stopped following; the cutover goes on (rsc describe shows it)');
        }),
    );
}
