import type { Command } from 'commander';
import type { OffsetTarget } from '@redis-stream-coordinator/core';
import { datetime, integer, streamId } from '../args';
import { UsageError } from '../connection';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { table } from '../output';

interface ResetOptions {
  toEarliest?: boolean;
  toLatest?: boolean;
  toDatetime?: number;
  toId?: string;
  shard?: number;
  dryRun?: boolean;
  force?: boolean;
}

function target(options: ResetOptions): OffsetTarget {
  const given: OffsetTarget[] = [];
  if (options.toEarliest) given.push('earliest');
  if (options.toLatest) given.push('latest');
  if (options.toDatetime !== undefined) given.push({ datetime: options.toDatetime });
  if (options.toId !== undefined) given.push({ id: options.toId });
  if (given.length !== 1) {
    throw new UsageError(
      `reset-offsets needs exactly one of --to-earliest, --to-latest, --to-datetime T, --to-id ID (got ${given.length})`,
    );
  }
  return given[0];
}

/** `rsc reset-offsets <prefix> <group> --to-… [--shard i] [--dry-run] [--force]`. */
export function registerResetOffsets(program: Command, io: RscIo): void {
  program
    .command('reset-offsets')
    .description(
      "move a group's position on its shards, like Kafka's --reset-offsets; refused while the group has live members unless --force",
    )
    .argument('<prefix>', 'stream prefix')
    .argument('<group>', 'consumer group')
    .option('--to-earliest', 'read every entry still in the streams again')
    .option('--to-latest', 'skip everything written so far')
    .option('--to-datetime <time>', 'read entries written at or after this time (ISO 8601 or epoch ms)', datetime)
    .option('--to-id <id>', 'read entries after this stream id', streamId)
    .option('--shard <i>', 'only this shard', integer('shardIndex'))
    .option('--dry-run', 'show the change, make none')
    .option('--force', 'reset even while members are alive (they read from the new positions on)')
    .action((prefix: string, group: string, options: ResetOptions, command: Command) => {
      const to = target(options);
      return withAdmin(command, io, async ({ admin, json, out }) => {
        const result = await admin.resetOffsets(prefix, group, {
          to,
          shardIndex: options.shard,
          dryRun: options.dryRun,
          force: options.force,
        });
        if (json) return out.json(result);
        out.print(`group ${group} of stream ${prefix}: ${result.dryRun ? 'dry run, nothing changed' : 'positions moved'}`);
        out.print(
          table(
            ['SHARD', 'LAST DELIVERED BEFORE', 'LAST DELIVERED AFTER', 'STILL PENDING'],
            result.shards.map((s) => [s.shardIndex, s.from ?? '(not read yet)', s.to, s.pending]),
          ),
        );
        const pending = result.shards.reduce((sum, s) => sum + s.pending, 0);
        if (pending > 0)
          out.print(`${pending} pending entr${pending === 1 ? 'y stays' : 'ies stay'} pending: their owner (or the next one) handles them`);
      });
    });
}
