import { Argument, type Command } from 'commander';
import {
  type CoordinatorAdmin,
  type DeadLetter,
  DeadLetterReplayError,
  type DeadLetterFilter,
  type DeadLetterReplay,
} from '@redis-stream-coordinator/core';
import { datetime, integer } from '../args';
import { UsageError } from '../connection';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { type Printer, table } from '../output';

interface DeadLetterOptions {
  id?: string;
  all?: boolean;
  key?: string;
  error?: string;
  shard?: number;
  since?: number;
  until?: number;
  count: number;
  takeOverAfterMs?: number;
}

function filterOf(options: DeadLetterOptions): DeadLetterFilter {
  return {
    ...(options.key !== undefined ? { key: options.key } : {}),
    ...(options.error !== undefined ? { errorContains: options.error } : {}),
    ...(options.shard !== undefined ? { shardIndex: options.shard } : {}),
    ...(options.since !== undefined ? { since: options.since } : {}),
    ...(options.until !== undefined ? { until: options.until } : {}),
  };
}

/** Replay and purge act on --id, --all, or a filter, never on everything by accident. */
function selection(action: string, options: DeadLetterOptions): { id: string } | { filter: DeadLetterFilter } {
  const filter = filterOf(options);
  const filtered = Object.keys(filter).length > 0;
  if (options.id !== undefined && (options.all || filtered)) throw new UsageError(`${action}: give --id alone, not with --all or a filter`);
  if (options.id !== undefined) return { id: options.id };
  if (options.all && filtered) throw new UsageError(`${action}: --all takes every dead letter; drop it to use the filter`);
  if (!options.all && !filtered)
    throw new UsageError(`${action} needs --id REF, --all, or a filter (--key, --error, --shard, --since, --until)`);
  return { filter };
}

/** The payload as people read it (a binary codec's decoded, or base64: DeadLetter.payloadText) and the headers. */
function payloadOf(letter: DeadLetter): { payload?: string; headers?: string } {
  const out: { payload?: string; headers?: string } = { payload: letter.payloadText };
  for (let i = 0; i + 1 < letter.fields.length; i += 2) {
    if (letter.fields[i] === 'h') out.headers = letter.fields[i + 1];
  }
  return out;
}

const clip = (text: string, width: number) => (text.length > width ? `${text.slice(0, width - 1)}…` : text);

function renderReplays(results: DeadLetterReplay[]): string {
  const counts = new Map<string, number>();
  for (const r of results) counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
  const summary = ['replayed', 'found-earlier-replay', 'gone', 'not-replayable'].map((s) => `${s} ${counts.get(s) ?? 0}`).join(', ');
  if (results.length === 0) return 'no dead letters matched';
  return `${table(
    ['REF', 'STATUS', 'WRITTEN TO', 'NOTE'],
    results.map((r) => [r.ref, r.status, r.to ? `shard ${r.to.shardIndex} id ${r.to.id}` : '', r.reason]),
  )}\n${summary}`;
}

async function act(
  admin: CoordinatorAdmin,
  prefix: string,
  group: string,
  action: string,
  options: DeadLetterOptions,
  json: boolean,
  out: Printer,
): Promise<void> {
  switch (action) {
    case 'list': {
      const letters = await admin.readDeadLetters(prefix, group, { ...filterOf(options), count: options.count });
      if (json) return out.json(letters);
      if (letters.length === 0) return out.print('no dead letters');
      out.print(
        table(
          ['REF', 'DEAD-LETTERED', 'SHARD', 'ENTRY ID', 'KEY', 'ATTEMPTS', 'ERROR'],
          letters.map((l) => [l.ref, l.deadLetteredAt, l.shardIndex, l.entryId, l.key, l.attempts, clip(l.error, 60)]),
        ),
      );
      if (letters.length === options.count) out.print(`(first ${options.count}; --count shows more)`);
      return;
    }
    case 'show': {
      if (options.id === undefined) throw new UsageError('show needs --id REF (rsc dead-letters <prefix> <group> list shows the refs)');
      const letter = await admin.showDeadLetter(prefix, group, options.id);
      if (!letter)
        throw new Error(`dead letter ${options.id} not found in dead letters ${group} of stream ${prefix} (replayed or purged?)`);
      if (json) return out.json(letter);
      const { payload, headers } = payloadOf(letter);
      out.print(
        table(
          ['FIELD', 'VALUE'],
          [
            ['ref', letter.ref],
            ['dead-lettered', letter.deadLetteredAt],
            ['shard', letter.shardIndex],
            ['entry id', letter.entryId],
            ['key', letter.key],
            ['group', letter.consumerGroup],
            ['member', letter.memberId],
            ['attempts', letter.attempts],
            ['cause', letter.cause],
            ['error', letter.error],
            ['headers', headers],
            ['codec', letter.codec],
            ['payload', payload],
          ],
        ),
      );
      // A stack has many lines: after the table, not in a cell of it.
      if (letter.stack !== undefined) out.print(`\nstack:\n${letter.stack}`);
      return;
    }
    case 'replay': {
      const chosen = selection('replay', options);
      const replayOptions = { takeOverAfterMs: options.takeOverAfterMs };
      let results: DeadLetterReplay[];
      try {
        results =
          'id' in chosen
            ? [await admin.replayDeadLetter(prefix, group, chosen.id, replayOptions)]
            : await admin.replayDeadLetters(prefix, group, chosen.filter, replayOptions);
      } catch (error) {
        if (error instanceof DeadLetterReplayError) {
          if (json) out.json(error.results);
          else out.print(renderReplays(error.results));
        }
        throw error;
      }
      if (json) out.json(results);
      else out.print(renderReplays(results));
      const kept = results.filter((r) => r.status === 'not-replayable');
      if (kept.length > 0)
        throw new Error(`${kept.length} dead letter(s) cannot be replayed and were kept (first: ${kept[0].ref}: ${kept[0].reason})`);
      return;
    }
    case 'purge': {
      const chosen = selection('purge', options);
      const results =
        'id' in chosen
          ? [await admin.purgeDeadLetter(prefix, group, chosen.id)]
          : await admin.purgeDeadLetters(prefix, group, chosen.filter);
      if (json) return out.json(results);
      const purged = results.filter((r) => r.purged).length;
      out.print(`purged ${purged} dead letter(s)${results.length > purged ? `; ${results.length - purged} already gone` : ''}`);
      return;
    }
  }
}

/** `rsc dead-letters <prefix> <group> list|show|replay|purge`. */
export function registerDeadLetters(program: Command, io: RscIo): void {
  program
    .command('dead-letters')
    .description("list, show, replay (to the entry's key) or purge a group's dead letters")
    .argument('<prefix>', 'stream prefix')
    .argument('<group>', 'consumer group, or the dead-letter destination its members name (member option deadLetter.stream)')
    .addArgument(new Argument('<action>', 'what to do').choices(['list', 'show', 'replay', 'purge']))
    .option('--id <ref>', 'one dead letter, by the REF that list shows (<shard>/<id>)')
    .option('--all', 'replay or purge: every dead letter of the group')
    .option('--key <key>', 'filter: entries with this routing key')
    .option('--error <text>', 'filter: errors containing this text')
    .option('--shard <i>', 'filter: this shard', integer('shardIndex'))
    .option('--since <time>', 'filter: dead-lettered at or after (ISO 8601 or epoch ms)', datetime)
    .option('--until <time>', 'filter: dead-lettered at or before (ISO 8601 or epoch ms)', datetime)
    .option('-n, --count <n>', 'list: at most this many', integer('admin.readDeadLetters.count'), 100)
    .option(
      '--take-over-after-ms <ms>',
      'replay: take over a replay mark this old (a replay that crashed)',
      integer('admin.replay.takeOverAfterMs'),
    )
    .action((prefix: string, group: string, action: string, options: DeadLetterOptions, command: Command) => {
      if (action === 'replay' || action === 'purge') selection(action, options);
      return withAdmin(command, io, ({ admin, json, out }) => act(admin, prefix, group, action, options, json, out));
    });
}
