/**
 * The promise of the dead-letter operations as soak actors (dead-letter-faults.ts; SPEC 10.5, 10.6;
 * docs/operations.md, Replay and Purge), a pure function of what the run recorded: however many of
 * its replays or purges failed between their steps and were run again, every dead letter an actor
 * saw ends replayed exactly once or still listed (and not replayed); a purged one is gone and
 * replayed at most once (a replay's write in flight while the purge ran may still land once, never
 * twice); and every replay's entry is handled by the group whose dead letter it was.
 */
import { type DeadLetter, type DeadLetterOperations, deadLetterKey, type Fault, type ReplayWrite, type Run } from './records';

export interface DeadLetterOutcomeInput {
  operations: DeadLetterOperations;
  /** Every dead letter in Redis at the end (with its ref). */
  listedAtEnd: DeadLetter[];
  /** Replay entries found in the shard streams at the end (those trimmed after they were handled show in `runs`). */
  writes: ReplayWrite[];
  runs: Run[];
  /** Whether the group has not acknowledged entry `id` of `shard` at the end. */
  unacknowledged: (group: string, shard: number, id: string) => boolean;
  /** Faults of the run: a restart that lost every key took what was written before it. */
  faults: Fault[];
}

/** The entry's time: the milliseconds part of its id (Redis time, comparable with the harness's clock on one host). */
const idTime = (id: string) => Number(id.split('-')[0]);

export function deadLetterOutcomes(input: DeadLetterOutcomeInput): string[] {
  const { operations, runs } = input;
  const lossTimes = input.faults.filter((f) => f.dataLoss).map((f) => f.at);
  /** Redis lost every key after `t`: what was there then may be gone, not by the operations. */
  const lostAfter = (t: number) => lossTimes.some((loss) => loss >= t);
  const writes = new Map<string, Map<string, ReplayWrite>>();
  const addWrite = (w: ReplayWrite) => {
    const k = deadLetterKey(w.group, w.ref);
    const byEntry = writes.get(k) ?? new Map<string, ReplayWrite>();
    byEntry.set(`${w.shard}/${w.id}`, w);
    writes.set(k, byEntry);
  };
  for (const w of input.writes) addWrite(w);
  // The replay's group's runs only: another group's copy of it (a deferring group's parked or
  // deferred copy keeps its headers, under a new id) is no write of the replay.
  for (const run of runs)
    if (run.replayOf && run.group === run.replayOf.group)
      addWrite({ group: run.replayOf.group, ref: run.replayOf.ref, shard: run.shard, id: run.id });
  const listed = new Set(input.listedAtEnd.filter((d) => d.ref !== undefined).map((d) => deadLetterKey(d.group, d.ref!)));

  const problems: string[] = [];
  const checked = new Set<string>();
  for (const letter of operations.seen) {
    const k = deadLetterKey(letter.group, letter.ref ?? '');
    if (checked.has(k)) continue;
    checked.add(k);
    const written = [...(writes.get(k)?.keys() ?? [])];
    const purged = operations.purgeAsked.has(k);
    if (written.length > 1) problems.push(`${k} replayed ${written.length} times: ${written.join(', ')}`);
    if (listed.has(k) && written.length > 0) problems.push(`${k} still listed, yet replayed to ${written.join(', ')}`);
    if (listed.has(k) && purged) problems.push(`${k} still listed, yet purged`);
    if (!listed.has(k) && written.length === 0 && !purged && !lostAfter(letter.t))
      problems.push(
        `${k} gone, neither replayed nor purged${operations.replayAsked.has(k) ? ' (a replay was asked for)' : ' (no operation asked for it)'}`,
      );
    const answer = operations.answered.get(k);
    if (answer !== undefined && !written.includes(answer) && !lostAfter(idTime(answer.split('/')[1])))
      problems.push(`${k}: its replay answered ${answer}, where no replay of it is`);
  }

  // Each replay's entry handled by the group whose dead letter it was: run to success or dead-lettered again, and acknowledged.
  const done = new Set(runs.filter((r) => r.ok && r.end !== undefined).map((r) => `${r.group}/${r.shard}/${r.id}`));
  for (const d of [...operations.seen, ...input.listedAtEnd]) done.add(`${d.group}/${d.shard}/${d.id}`);
  for (const [k, byEntry] of writes) {
    for (const w of byEntry.values()) {
      if (lostAfter(idTime(w.id))) continue;
      const handled = done.has(`${w.group}/${w.shard}/${w.id}`);
      const open = input.unacknowledged(w.group, w.shard, w.id);
      if (!handled || open)
        problems.push(`${k}: its replay ${w.shard}/${w.id} ${handled ? 'handled but not acknowledged' : 'never handled'} by ${w.group}`);
    }
  }
  return problems;
}
