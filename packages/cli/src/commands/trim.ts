import type { Command } from 'commander';
import { TrimError, type TrimResult } from '@redis-stream-coordinator/core';
import { integer } from '../args';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { table } from '../output';

function render(result: TrimResult): string {
  const head =
    `stream ${result.streamPrefix}: ${result.dryRun ? 'dry run, would trim' : 'trimmed'} ${result.trimmed} entr${result.trimmed === 1 ? 'y' : 'ies'}` +
    ` (groups: ${result.groups.join(', ') || 'none'})`;
  return `${head}\n${table(
    ['SHARD', result.dryRun ? 'WOULD TRIM' : 'TRIMMED', 'BELOW ID', 'LIMITED BY', 'NOTE'],
    result.shards.map((s) => [
      s.shardIndex,
      s.trimmed,
      s.minId === '' ? '(all)' : s.minId,
      s.limitedBy,
      s.error ? `error: ${s.error}` : s.leftAlone,
    ]),
  )}`;
}

/** `rsc trim <prefix> [--dry-run] [--max-len n]`. */
export function registerTrim(program: Command, io: RscIo): void {
  program
    .command('trim')
    .description('delete entries every consumer group has been delivered and has acknowledged (XTRIM MINID per shard)')
    .argument('<prefix>', 'stream prefix')
    .option('--dry-run', 'report what would be trimmed, delete nothing')
    .option('--max-len <n>', 'for shards no group reads: keep at most this many newest entries', integer('admin.trim.maxLen'))
    .action((prefix: string, options: { dryRun?: boolean; maxLen?: number }, command: Command) =>
      withAdmin(command, io, async ({ admin, json, out }) => {
        try {
          const result = await admin.trim(prefix, { dryRun: options.dryRun ?? false, maxLen: options.maxLen });
          if (json) out.json(result);
          else out.print(render(result));
        } catch (error) {
          if (!(error instanceof TrimError)) throw error;
          if (json) out.json(error.result);
          else out.print(render(error.result));
          throw error;
        }
      }),
    );
}
