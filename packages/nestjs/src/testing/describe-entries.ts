import { type EntryRecord, outcomeOf } from './entry-log';

/** How many entries a timeout message lists besides counting them. */
const LISTED_ENTRIES = 5;

/** The longest payload a timeout message quotes. */
const QUOTED_PAYLOAD_CHARS = 80;

function quote(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > QUOTED_PAYLOAD_CHARS ? `${text.slice(0, QUOTED_PAYLOAD_CHARS)}…` : text;
}

/** One entry's story, for error messages: `1-0 (shard 2, key "o-1", {"n":1}): attempt 1 failed (…) [injected], attempt 2 succeeded; handled`. */
export function describeEntry(record: EntryRecord): string {
  const message = record.message;
  const what = message ? `, key ${quote(message.key)}, ${quote(message.payload)}` : ', not given to a handler';
  const attempts = record.attempts
    .map((a, i) => `attempt ${i + 1} ${a.outcome}${a.error ? ` (${a.error})` : ''}${a.injected ? ' [injected]' : ''}`)
    .join(', ');
  const outcome = outcomeOf(record);
  const end = record.deadLetter
    ? `dead-lettered (${record.deadLetter.cause}: ${record.deadLetter.reason})`
    : record.deferred
      ? `deferred, due at ${new Date(record.deferred.dueAt).toISOString()} (kit.releaseScheduled makes it due now)`
      : record.parked
        ? record.parked.dueAt > 0
          ? `parked behind its key's deferred retry, due with it at ${new Date(record.parked.dueAt).toISOString()} (kit.releaseScheduled makes them due now)`
          : "appended again behind its key's copies, not handled yet"
        : outcome === 'handled'
          ? 'handled'
          : 'not acknowledged yet';
  return `${record.id} (shard ${record.shardIndex}${what}): ${attempts === '' ? 'no attempt' : attempts}; ${end}`;
}

/** What a group was seen doing: counts, then the matching entries (or the last ones) told in full. */
export function describeSeen(records: EntryRecord[], matching: EntryRecord[], forgotten: number): string {
  const count = (outcome: string) => records.filter((r) => outcomeOf(r) === outcome).length;
  const counts =
    records.length === 0
      ? 'it was given no entry since the kit was attached'
      : `it saw ${records.length} entries: ${count('handled')} handled, ${count('dead-lettered')} dead-lettered, ${count('pending')} not acknowledged yet`;
  const told = matching.length > 0 ? matching : records;
  const label = matching.length > 0 ? 'matching' : 'last';
  const list = told
    .slice(-LISTED_ENTRIES)
    .map((r) => `\n  - ${describeEntry(r)}`)
    .join('');
  const older = forgotten > 0 ? ` (${forgotten} older entries forgotten)` : '';
  return `${counts}${older}${list === '' ? '' : `; ${label}:${list}`}`;
}
