/**
 * The checker's promises beyond lost, order and overlaps (3e7695b; docs/reliability.md, What
 * the counts mean), each a pure function of what the harness recorded:
 * nothing stuck at a live owner, dead letters fenced like acks, one accepted run per entry per grant.
 */
import { offsetResets, resetBetween } from './offset-resets';
import type { DeadLetter, Fault, FaultKind, PendingSample, RecordLine, Run } from './records';

/** Samples further apart than this break a streak (the harness was not looking, e.g. Redis restarting). */
const MAX_SAMPLE_GAP_MS = 1500;

/**
 * `lanes`: whether the owner (by member id) runs key-ordered lanes, for every member or per member.
 * Entries pending at the shard's owner while that owner was live and under no fault, with no handler
 * of the entry running (a retry dropped, a dead-letter write given up, a lost read reply:
 * da4f26b), reported once per entry with how long they sat:
 * - skipped: for longer than `afterMs` (the sweep interval plus a margin) while the owner started
 *   later entries of the same shard (a retry dropped, a dead-letter write given up);
 * - forgotten: for longer than `quietAfterMs` while the owner started nothing on the shard (an entry
 *   of a lost read reply on a quiet shard, a shard blocked for good).
 * Entries queued behind earlier ones (a backlog worked through in order, a retry still going) are
 * neither: the owner makes progress on the shard and runs nothing past them. The time an entry sat
 * counts from the end of its last run by the owner, if that was later than when it was first seen:
 * after a run ends the entry stays pending until its acknowledgement lands, while the next entries
 * of the shard start at once, so an entry that waited long in a backlog would otherwise count as
 * skipped for the few milliseconds its acknowledgement takes.
 */
export function stuckEntries(
  runs: Run[],
  samples: PendingSample[],
  afterMs: number,
  quietAfterMs = afterMs * 2,
  lanes: boolean | ((member: string) => boolean) = false,
): string[] {
  const lanesOf = typeof lanes === 'function' ? lanes : () => lanes;
  const byEntry = new Map<string, Run[]>();
  const byShard = new Map<string, Run[]>();
  /** With lanes, "later entries ran" means later entries of the entry's own key: "group/shard/id" -> key. */
  const keyOf = new Map<string, string>();
  for (const run of runs) {
    keyOf.set(`${run.group}/${run.shard}/${run.id}`, run.key);
    for (const [map, k] of [
      [byEntry, `${run.group}/${run.member}/${run.shard}/${run.id}`],
      [byShard, `${run.group}/${run.member}/${run.shard}`],
    ] as const) {
      const list = map.get(k);
      if (list) list.push(run);
      else map.set(k, [run]);
    }
  }
  const running = (group: string, member: string, shard: number, id: string, t: number) =>
    (byEntry.get(`${group}/${member}/${shard}/${id}`) ?? []).some((r) => r.start <= t && (r.end === undefined || r.end >= t));
  /** When the owner's last run of the entry that ended by `t` ended (-Infinity: none). */
  const lastEnded = (group: string, member: string, shard: number, id: string, t: number) => {
    let last = -Infinity;
    for (const r of byEntry.get(`${group}/${member}/${shard}/${id}`) ?? [])
      if (r.end !== undefined && r.end <= t && r.end > last) last = r.end;
    return last;
  };
  for (const list of byShard.values()) list.sort((a, b) => a.start - b.start);
  // Only the runs that started in [from, to] (found by bisection: a long soak has many per shard).
  const started = (group: string, member: string, shard: number, from: number, to: number, after?: string) => {
    const list = byShard.get(`${group}/${member}/${shard}`) ?? [];
    // With lanes, an entry never run has no known key: only the quiet bound applies to it.
    const key = lanesOf(member) && after !== undefined ? (keyOf.get(`${group}/${shard}/${after}`) ?? null) : undefined;
    if (key === null) return false;
    for (let i = firstAtOrAfter(list, from, (r) => r.start); i < list.length && list[i].start <= to; i++) {
      if (key !== undefined && list[i].key !== key) continue;
      if (after === undefined || compareIds(list[i].id, after) > 0) return true;
    }
    return false;
  };

  const streaks = new Map<string, { since: number; last: number; member: string }>();
  const stuck = new Map<string, string>();
  for (const sample of [...samples].sort((a, b) => a.t - b.t)) {
    const here = new Set<string>();
    if (sample.owner !== null && sample.ownerLive) {
      for (const p of sample.pending) {
        if (p.consumer !== sample.owner || running(sample.group, sample.owner, sample.shard, p.id, sample.t)) continue;
        const k = `${sample.group}/${sample.shard}/${p.id}`;
        here.add(k);
        const streak = streaks.get(k);
        if (!streak || streak.member !== sample.owner || sample.t - streak.last > MAX_SAMPLE_GAP_MS) {
          streaks.set(k, { since: sample.t, last: sample.t, member: sample.owner });
          continue;
        }
        streak.last = sample.t;
        streak.since = Math.max(streak.since, lastEnded(sample.group, sample.owner, sample.shard, p.id, sample.t));
        const sat = streak.last - streak.since;
        const skipped = sat > afterMs && started(sample.group, sample.owner, sample.shard, streak.since, streak.last, p.id);
        const forgotten = sat > quietAfterMs && !started(sample.group, sample.owner, sample.shard, streak.since, streak.last);
        if (skipped || forgotten) {
          stuck.set(
            k,
            `${sample.group ? `${sample.group}: ` : ''}shard ${sample.shard} ${p.id} pending at ${sample.owner} for ${Math.round(sat)} ms with nothing running it${skipped ? ' while later entries ran' : ''}`,
          );
        }
      }
    }
    // Entries of this shard not seen in this sample end their streak.
    for (const k of streaks.keys()) if (k.startsWith(`${sample.group}/${sample.shard}/`) && !here.has(k)) streaks.delete(k);
  }
  return [...stuck.values()];
}

/** The index of the first item whose `at(item)` is `t` or later, in a list sorted by it. */
function firstAtOrAfter<T>(list: T[], t: number, at: (item: T) => number): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (at(list[mid]) < t) low = mid + 1;
    else high = mid;
  }
  return low;
}

function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-');
  const [bm, bs] = b.split('-');
  return am === bm ? Number(as) - Number(bs) : Number(am) - Number(bm);
}

/** How late a member's own record of a grant may be, compared with Redis's decision (slow replies). */
const LATE_RECORD_MS = 3000;

interface Holding {
  member: string;
  since: number;
}

/** Faults that stop a member process (SIGSTOP) from `at` until it is resumed (before `until`). */
const STOPPING = new Set<FaultKind>(['pause', 'zombie-dead-letter']);

/**
 * When an ack recorded at `t` by `member` surely ran in Redis: at `t`, unless the member was stopped
 * just before. A reply that came back while it was stopped is read, and recorded, only once it runs
 * again, however long the pause (two sessions and more: 6 s on the cluster harness); the ack may have
 * run any time since the pause began, so it counts from then. Not an ack under a grant the member
 * recorded after the pause began (`grantedAt`): that one ran after it.
 */
function ackRanBy(member: string, t: number, grantedAt: number | undefined, stops: Fault[]): number {
  for (const f of stops) {
    const stoppedThen = f.target === member && f.until !== undefined && t >= f.at && t <= f.until + LATE_RECORD_MS;
    if (stoppedThen && (grantedAt === undefined || grantedAt <= f.at)) return Math.min(t, f.at);
  }
  return t;
}

/**
 * Every dead letter must be written by the shard's owner of the time and never be acknowledged by
 * another member as well (SPEC 9.2: side writes are fenced like acks). "Not the owner of the time":
 * the writer had not been granted the shard, or another member's acknowledgement on the shard was
 * accepted after the writer's latest grant and before the write (the shard had moved on).
 * `faults`: the run's faults, for acks recorded late because their member was stopped (`ackRanBy`),
 * and for resets of offsets: an acknowledgement of the entry on the other side of a reset that moved
 * the group back over it belongs to another life of the entry (dead-lettered, then re-read and
 * handled after the reset, or the other way round), not to the dead letter's.
 */
export function deadLetterFencing(lines: RecordLine[], deadLetters: DeadLetter[], faults: Fault[] = []): string[] {
  const sorted = [...lines].sort((a, b) => a.t - b.t);
  const stops = faults.filter((f) => STOPPING.has(f.kind));
  const resets = offsetResets(faults);
  const grants = new Map<string, number[]>(); // group/member/shard -> grant times
  const acceptedAcks = new Map<string, { member: string; t: number }[]>(); // group/shard -> acks, by time
  const ackedBy = new Map<string, { member: string; t: number }[]>(); // group/shard/id -> accepted acks of it
  const grantRecorded = new Map<string, number>(); // group/member/shard/epoch -> when the member recorded that grant
  const firstRuns = new Map<string, number[]>(); // group/member/shard/id -> when its first attempts started, by time
  const freshRuns = new Map<string, number[]>(); // group/member/shard/id -> runs of a first delivery (delivery count 1), by time
  for (const line of sorted) {
    const g = line.g ?? '';
    if (line.e === 'start' && (line.n === undefined || line.n === 1)) {
      const k = `${g}/${line.m}/${line.s}/${line.id}`;
      const list = firstRuns.get(k);
      if (list) list.push(line.t);
      else firstRuns.set(k, [line.t]);
    }
    if (line.e === 'start' && line.dc === 1) {
      const k = `${g}/${line.m}/${line.s}/${line.id}`;
      const list = freshRuns.get(k);
      if (list) list.push(line.t);
      else freshRuns.set(k, [line.t]);
    }
    if (line.e === 'assigned') {
      for (const s of line.shards ?? []) {
        if (stops.length > 0) grantRecorded.set(`${g}/${line.m}/${s}/${line.ep}`, line.t);
        const k = `${g}/${line.m}/${s}`;
        // Appended in place: a long soak has hundreds of thousands of these lines.
        const list = grants.get(k);
        if (list) list.push(line.t);
        else grants.set(k, [line.t]);
      }
    }
    if (line.e === 'ack' && line.ok) {
      const k = `${g}/${line.s}`;
      const ack = {
        member: line.m,
        t: stops.length > 0 ? ackRanBy(line.m, line.t, grantRecorded.get(`${g}/${line.m}/${line.s}/${line.ge}`), stops) : line.t,
      };
      const list = acceptedAcks.get(k);
      if (list) list.push(ack);
      else acceptedAcks.set(k, [ack]);
      for (const id of line.ids ?? []) {
        const acks = ackedBy.get(`${k}/${id}`);
        if (acks) acks.push({ member: line.m, t: line.t });
        else ackedBy.set(`${k}/${id}`, [{ member: line.m, t: line.t }]);
      }
    }
  }
  // Acks moved back to when their member was stopped are out of order now.
  if (stops.length > 0) for (const list of acceptedAcks.values()) list.sort((a, b) => a.t - b.t);
  const problems: string[] = [];
  for (const d of deadLetters) {
    const groupLines = [...grants.keys()].some((k) => k.startsWith(`${d.group}/`)) ? d.group : '';
    const acks = acceptedAcks.get(`${groupLines}/${d.shard}`) ?? [];
    const name = `${d.group ? `${d.group}: ` : ''}shard ${d.shard} ${d.id} dead-lettered by ${d.member}`;
    // The dead letter's life of the entry began with the writer's first attempt of it (the latest
    // before the write): a reset after that and before the other ack moved the group back over an
    // entry the writer still held, and the other member's run is of the re-read, another life.
    const began = (firstRuns.get(`${d.group}/${d.member}/${d.shard}/${d.id}`) ?? []).filter((t) => t <= d.t).at(-1) ?? d.t;
    // Or the later of the two was of a delivery that came after the earlier one, as a first delivery
    // (count 1): an entry acknowledged (a dead letter is an ack) is delivered again only when a reset
    // moved its group back over it, whenever that reset was (the entry may have been pending at the
    // earlier member across it, its reply or its queue slow).
    const redelivered = (member: string, after: number, until: number) =>
      (freshRuns.get(`${d.group}/${member}/${d.shard}/${d.id}`) ?? []).some(
        (t) => t > after && t <= until && resetBetween(resets, d.group, d.shard, d.id, Number.NEGATIVE_INFINITY, t),
      );
    const other = (ackedBy.get(`${groupLines}/${d.shard}/${d.id}`) ?? []).find(
      (a) =>
        a.member !== d.member &&
        !resetBetween(resets, d.group, d.shard, d.id, a.t, d.t) &&
        !resetBetween(resets, d.group, d.shard, d.id, a.t, began) &&
        !(a.t > d.t ? redelivered(a.member, d.t, a.t) : redelivered(d.member, a.t, d.t)),
    );
    if (other) {
      problems.push(`${name}, also acknowledged by ${other.member}`);
      continue;
    }
    // A member records a grant when the answer reaches it, which a slow link delays: a write made
    // under a grant recorded up to LATE_RECORD_MS after it belongs to that grant.
    const granted = (grants.get(`${groupLines}/${d.member}/${d.shard}`) ?? []).filter((t) => t <= d.t + LATE_RECORD_MS);
    if (granted.length === 0) {
      problems.push(`${name}, which was never granted the shard before writing it`);
      continue;
    }
    const since: Holding = { member: d.member, since: granted[granted.length - 1] };
    // An ack's record can be late as well (its reply was slow): only one recorded well after the
    // grant is surely after it in Redis.
    let moved: { member: string; t: number } | undefined;
    for (let i = firstAtOrAfter(acks, since.since + LATE_RECORD_MS + 1e-3, (a) => a.t); i < acks.length && acks[i].t < d.t && !moved; i++) {
      if (acks[i].member !== d.member) moved = acks[i];
    }
    if (moved) problems.push(`${name} after ${moved.member} owned the shard (its acknowledgement was accepted at ${moved.t.toFixed(0)})`);
  }
  return problems;
}

/**
 * At most one accepted handler run per entry per grant (the `assigned` record that began it, see
 * `collectRuns`): under one grant a member runs an entry to success once; a second successful run
 * whose acknowledgement counted means the entry was read or claimed twice (e.g. a takeover page not
 * advancing the read cursor). Failed attempts are retries.
 */
export function grantDuplicates(runs: Run[]): string[] {
  const count = new Map<string, number>();
  const problems: string[] = [];
  for (const run of runs) {
    if (!run.ok || run.end === undefined || !run.acked) continue;
    // The grant is the assigned record that began it (epoch and time): epochs repeat in a recreated group.
    const k = `${run.group}/${run.process}/${run.grant ?? '?'}@${run.grantAt ?? '?'}/${run.shard}/${run.id}`;
    const n = (count.get(k) ?? 0) + 1;
    count.set(k, n);
    const grant =
      run.grant === undefined ? '?' : `${run.grant}${run.grantAt === undefined ? '' : ` (assigned at ${run.grantAt.toFixed(0)})`}`;
    if (n === 2)
      problems.push(
        `${run.group ? `${run.group}: ` : ''}shard ${run.shard} ${run.id} run to success twice by ${run.process} under grant ${grant}`,
      );
  }
  return problems;
}

/**
 * Key#seq handled from two different stream entries (of one group): the producer wrote it twice.
 * In a `deferring` group (CheckExtras.deferringGroups), handled to success from two.
 * `allowed`: those sent again after a reply that never came (at-least-once). A dead letter's replay
 * is no second write of the producer (whether it was replayed once is `deadLetterOutcomes`).
 * `lossTimes`: when Redis lost every key, the producer's write log with them: two copies whose
 * stream ids straddle one are a write Redis ran just before the loss, its reply lost with the
 * connection, and the resend (by ioredis on reconnect, or the producer) that no log could recognise
 * (the short tier of afcd154: key-47#126 read from shard 8 at 1796201900306 by a group, Redis
 * flushed at 1796201900317, written again to shard 6 at 1796201900484).
 */
/** Whether the stream ids of two copies (`shard/ms-seq`) lie on either side of a loss of every key. */
function straddlesLoss(a: string, b: string, lossTimes: number[]): boolean {
  const ms = (entry: string) => Number(entry.slice(entry.indexOf('/') + 1).split('-')[0]);
  const [first, last] = [Math.min(ms(a), ms(b)), Math.max(ms(a), ms(b))];
  return lossTimes.some((t) => first <= t && t < last);
}

export function writtenTwice(runs: Run[], allowed: Set<string>, deferring: Set<string> = new Set(), lossTimes: number[] = []): string[] {
  const entryOf = new Map<string, string>();
  const problems = new Set<string>();
  for (const run of runs) {
    const k = `${run.group}/${run.key}#${run.seq}`;
    const entry = `${run.shard}/${run.id}`;
    const seen = entryOf.get(k);
    // A dead letter's replay carries the original's key and sequence number: written again on purpose.
    if (allowed.has(`${run.key}#${run.seq}`) || run.replayOf) continue;
    // A deferring group's failed, parked or appended-again entry comes back as a copy with a new id:
    // only entries that ran to success count there (a copy follows an entry that did not).
    if (deferring.has(run.group) && !(run.ok && run.end !== undefined)) continue;
    if (seen === undefined) entryOf.set(k, entry);
    else if (seen !== entry && !straddlesLoss(seen, entry, lossTimes))
      problems.add(`${run.group ? `${run.group}: ` : ''}${run.key}#${run.seq} in ${seen} and ${entry}`);
  }
  return [...problems];
}
