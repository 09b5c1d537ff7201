/**
 * The reliability checker: from what the producers wrote, what every member process recorded, what
 * the harness sampled from Redis and the faults it injected, it tells whether the product's promises
 * held (SPEC sections 1, 5 and 9). Pure: every input is data, so its own tests
 * (test/reliability/reliability-checker.test.ts) can show that it catches each broken promise.
 */
import { orderEvidence, type OrderViolation } from './order-evidence';
import { deadLetterOutcomes } from './dead-letter-outcomes';
import { type KindReport, reportPerKind } from './kind-report';
import { offsetResets, rewound, skippedBy } from './offset-resets';
import { deadLetterFencing, grantDuplicates, stuckEntries, writtenTwice } from './promises';
import type {
  DeadLetter,
  DeadLetterOperations,
  Fault,
  FaultKind,
  PendingSample,
  Produced,
  RecordLine,
  ReplayWrite,
  Run,
  TransportEpisode,
} from './records';
import { emptyTransportFigures, type TransportFigures, transportOutcomes } from './transport-outcomes';
import { compareStreamIds } from '../../packages/core/src/protocol/stream-ids';

export type { DeadLetter, Fault, FaultKind, PendingSample, Produced, RecordLine, Run } from './records';

export interface CheckExtras {
  deadLetters?: DeadLetter[];
  pendingSamples?: PendingSample[];
  /**
   * An entry pending at a live, unfaulted owner (with no handler of it running) is stuck after this
   * long when later entries of its shard ran meanwhile, and after `quietStuckAfterMs` in any case.
   */
  stuckAfterMs?: number;
  quietStuckAfterMs?: number;
  /** "key#seq" the producer sent again after a lost reply: a second stream entry of it is allowed. */
  mayBeTwice?: Set<string>;
  /** Per group: "shard/id" it cannot read (deleted by `deleteDrainedShards` before the group was created). */
  unreadable?: Map<string, Set<string>>;
  /** Every consumer group that must have handled every produced entry; default: the groups in the records. */
  groups?: string[];
  /**
   * The members ran key-ordered lanes (all of them, or those the function names by member id): a
   * shard's keys run side by side, so an entry waiting behind its own key's earlier entry while
   * other keys run is not skipped; only later entries of its own key running past it are.
   */
  lanes?: boolean | ((member: string) => boolean);
  /** Every member id's kind (member-kinds.ts), for the report per kind. */
  memberKinds?: Map<string, string>;
  /** When the main producer wrote nothing for a long while, and why (the harness watches it). */
  producerStalls?: string[];
  /** The stream's `resizeHistory` at the end (JSON), for the evidence of an order violation. */
  resizeHistory?: string;
  /** "shard/id" gone from its shard stream at the end: trimmed (retention, or before a group was created). */
  trimmedAway?: Set<string>;
  /** What the dead-letter actors listed and asked for (replay, purge), and the replays found in the streams at the end. */
  deadLetterOperations?: DeadLetterOperations;
  replayWrites?: ReplayWrite[];
  /** What the transport actors recorded, one episode per transport fault (transport-actors.ts). */
  transportEpisodes?: TransportEpisode[];
  /**
   * Groups whose members retry deferred (`retryMode: 'deferred'`): a failed entry is acknowledged
   * and comes back as a copy with a new id (its parked later entries too), so an entry of theirs is
   * found by key and sequence number, and a key#seq in several stream entries is a copy, not a
   * second write, unless two of them ran to success.
   */
  deferringGroups?: string[];
}

export interface CheckReport {
  produced: number;
  handled: number;
  /** Produced entries that Redis counts as acknowledged by the group at the end. */
  acknowledged: number;
  /** Produced entries never handled to the end nor dead-lettered, or not acknowledged at the end (must be none). */
  lost: string[];
  /**
   * Produced entries gone because Redis lost every key (a restart without persistence) before they
   * were handled, or because a master failed over within `REPLICATION_WINDOW_MS` of confirming them
   * without waiting for a replica (`Fault.unreplicated`).
   */
  redisLost: string[];
  /**
   * Lost entries (in `lost` too) that retention trimmed away before a group handled them: a trim
   * that did not keep what a group still needed. Apart from `redisLost`; must be none.
   */
  trimmedUnhandled: string[];
  /**
   * Produced entries a reset-offsets moved its group forward over, undelivered (after the group's
   * last-delivered id then, up to the reset point): skipped on the operator's word (`--to-datetime`
   * makes entries at or after the time the next ones read; a shard the group was behind on moves
   * forward), counted apart from `lost`.
   */
  skippedByReset: string[];
  /**
   * Keys whose first handling of a sequence number came after a later one of the same key, or whose
   * first successful handling did ("settled": a deferred entry whose copy ran after its key's later
   * entries, as `deferredOrder: 'none'` allows and 'key' must not).
   */
  orderViolations: string[];
  /** Delayed entries (`Produced.dueAt`) released into a stream before their due time (must be none). */
  early: string[];
  /** What the deferring groups' members recorded: entries deferred (a failure retried later) and parked (behind a deferral of their key). */
  deferrals: { deferred: number; parked: number };
  /**
   * Delayed entries: how many; how late they were released into a stream after their due time (its
   * stream id's time, Redis' clock) and how late their first run in a group came, at the 99th
   * percentile and at most (ms). Within about `blockMs` of the due time when the shard's owner runs
   * unfaulted; a fault on it makes the next owner release them.
   */
  delayed: { count: number; releaseLateP99Ms: number; releaseLateMaxMs: number; lateP99Ms: number; lateMaxMs: number };
  /** For the first few order violations: the key's entries, their first runs and the resizes around them (order-evidence.ts). */
  orderEvidence: string[];
  /** Two members on one shard at the same time where the earlier one's acknowledgement counted. */
  overlaps: string[];
  /** Two runs of one key of one shard by one member process at the same time (lanes must run a key's entries one by one). */
  keyOverlaps: string[];
  duplicates: number;
  /** Duplicates with no fault that could have caused them. */
  unexplainedDuplicates: string[];
  /**
   * Entries left pending at a live owner with nothing running them (a retry dropped while the lease
   * looked unsafe, a dead-letter write given up, a lost read reply: fixed in da4f26b).
   */
  stuck: string[];
  deadLetters: number;
  /** Dead letters written by a member that was not the shard's owner then, or also acknowledged by another member. */
  unfencedDeadLetters: string[];
  /** More than one successful, accepted handler run of one entry under one grant. */
  grantDuplicates: string[];
  /**
   * A key's sequence number found in two stream entries: a producer batch written in part and sent
   * again whole (SPEC 9.5), which replays a key's earlier entries after its later ones.
   */
  writtenTwice: string[];
  /** Faults the group never recovered from within the harness's deadline. */
  unrecovered: string[];
  /**
   * Entries a reset-offsets asked the group to read again (after its point, up to where the group
   * was) that no run handled after the reset: a trim took them, or the reset did not take (must be none).
   */
  notReplayed: string[];
  /** The main producer wrote nothing for 20 s or more (a send that never answered, or refused for good): must be none. */
  producerStalls: string[];
  /**
   * Dead letters the replay and purge actors saw that did not end replayed exactly once or still
   * listed (or purged: gone, replayed at most once), and replays their group never handled (must be none).
   */
  deadLetterOutcomes: string[];
  /**
   * The Nest transport's broken promises (transport-outcomes.ts): a request settled twice, never, with
   * another's answer or out of time; an event acknowledged before its handler returned, or never
   * handled; a forged request not refused or its target written; a reply outside an inbox (must be none).
   */
  transport: string[];
  /** What the transport actors did: requests, answers, timeouts, events, forged requests refused. */
  transportFigures: TransportFigures;
  /** Per member kind (`CheckExtras.memberKinds`): its share of the work and the problem lines naming its members. */
  kinds: KindReport[];
  faults: Fault[];
}

/**
 * Faults that may legitimately cause a redelivery (at-least-once). A graceful stop or a join must
 * not: the leaving member finishes and acknowledges what it started before it gives shards up. Nor
 * may latency below the session timeout, a resize or a failing side write.
 */
const REDELIVERING = new Set<FaultKind>([
  'kill',
  'pause',
  'partition',
  'reset',
  'redis-restart',
  'redis-flush-restart',
  // Beyond the session the member is expired while it works; a lost reply is a reset mid-command.
  'latency-session',
  'latency-beyond',
  'lost-read',
  'lost-ack',
  'lost-heartbeat',
  // Every heartbeat fails while memory is full: the session runs out.
  'dead-letter-oom',
  'partial-batch',
  // A pause (its shards move while its handler runs); a lease that may run out; every member unknown at once.
  'zombie-dead-letter',
  'unsafe-lease',
  'group-keys-lost',
  // A member expired while it works (late answers), a connection reset with calls unanswered on it,
  // a stop() that gives up on an ack it sent (the next owner runs the entry again).
  'late-answers',
  'late-join',
  'half-open-commands',
  'half-open-reads',
  'half-open-acks',
  'half-open-wake',
  'freeze-on-stop',
  // A static member's instance killed or paused while it ran entries: the next one runs them again.
  'static-restart',
  // Deliveries and acks the old master had not replicated are undone (on the fault's shards only).
  // A slot move is not here: MIGRATE moves a stream whole, its group and pending entries with it.
  'failover',
]);
/** Faults that hit every member at once. */
const GLOBAL = new Set<FaultKind>(['redis-restart', 'redis-flush-restart', 'dead-letter-oom', 'partial-batch', 'group-keys-lost']);

/** How long before a first run a fault can still explain its redelivery (the run may have started just before it hit). */
const EXPLAIN_BEFORE_MS = 1000;

const DEFAULT_GROUP = '';

/**
 * How long before a failover a write confirmed without a replica may still have been lost with the
 * old master: its replica trails it by milliseconds here; an older write gone is the library's loss.
 */
export const REPLICATION_WINDOW_MS = 2000;

/** How far from an unordered resize two writes of a key may be and still be excused an inversion. */
const UNORDERED_SLACK_MS = 5000;

/**
 * Every handler run, with the grant it ran under and whether an acknowledgement of it under that
 * grant was accepted. A grant is the `assigned` record that began it (its epoch and time), not the
 * epoch alone: after a group is recreated the epochs start again, and an ack accepted under the new
 * life's "grant 3" says nothing about a run under the old life's "grant 3" (which the loss of the
 * group fenced; its entry is rightly run again).
 */
export function collectRuns(lines: RecordLine[]): Run[] {
  const sorted = [...lines].sort((a, b) => a.t - b.t);
  const grantName = (epoch: number | undefined, at: number | undefined) => `${epoch ?? ''}@${at ?? ''}`;
  // Grants, acks and runs are a process's (`h`, else its member id): a static member's next
  // instance has grants of its own, and the old one's acks must not count for its runs.
  const proc = (line: RecordLine) => line.h ?? line.m;
  // An ack carries its grant's epoch (`ge`): it belongs to the latest `assigned` record of that
  // epoch for its process and shard before it (a process records a grant before it can ack under it).
  const assignedAt = new Map<string, Map<number, number>>(); // group/process/shard -> epoch -> time of its latest assigned record
  const accepted = new Set<string>();
  /** The same without the grant: for runs whose grant the records do not show. */
  const acceptedAnyGrant = new Set<string>();
  for (const line of sorted) {
    const g = line.g ?? DEFAULT_GROUP;
    if (line.e === 'assigned') {
      for (const s of line.shards ?? []) {
        const k = `${g}/${proc(line)}/${s}`;
        const byEpoch = assignedAt.get(k);
        if (byEpoch) byEpoch.set(line.ep!, line.t);
        else assignedAt.set(k, new Map([[line.ep!, line.t]]));
      }
    }
    if (!(line.e === 'ack' && line.ok)) continue;
    const at = line.ge === undefined ? undefined : assignedAt.get(`${g}/${proc(line)}/${line.s}`)?.get(line.ge);
    for (const id of line.ids ?? []) {
      accepted.add(`${g}/${proc(line)}/${line.s}/${id}/${grantName(line.ge, at)}`);
      acceptedAnyGrant.add(`${g}/${proc(line)}/${line.s}/${id}`);
    }
  }
  const open = new Map<string, Run>();
  const grants = new Map<string, { epoch: number; at: number }>(); // group/process/shard -> the grant now
  const runs: Run[] = [];
  for (const line of sorted) {
    const g = line.g ?? DEFAULT_GROUP;
    if (line.e === 'assigned') for (const s of line.shards ?? []) grants.set(`${g}/${proc(line)}/${s}`, { epoch: line.ep!, at: line.t });
    const key = `${g}/${proc(line)}/${line.s}/${line.id}`;
    if (line.e === 'start') {
      const grant = grants.get(`${g}/${proc(line)}/${line.s}`);
      const acked = grant === undefined ? acceptedAnyGrant.has(key) : accepted.has(`${key}/${grantName(grant.epoch, grant.at)}`);
      const run: Run = {
        group: g,
        member: line.m,
        process: proc(line),
        shard: line.s!,
        id: line.id!,
        key: line.k!,
        seq: line.q!,
        start: line.t,
        ok: true,
        grant: grant?.epoch,
        grantAt: grant?.at,
        acked,
      };
      if (line.rp !== undefined) run.replayOf = { ref: line.rp, group: line.rg ?? '' };
      open.set(key, run);
      runs.push(run);
    } else if (line.e === 'end') {
      const run = open.get(key);
      if (run) {
        run.end = line.t;
        run.ok = line.ok !== false;
      }
      open.delete(key);
    }
  }
  return runs;
}

/**
 * `unacknowledged`: "shard/id" (one group) or "group/shard/id" of the produced entries that Redis
 * still has pending or undelivered when the run ends.
 */
/** Per group and process: when it recorded that it lost shards on its own (its lease, or fenced), and which. */
function ownLosses(lines: RecordLine[]): Map<string, { t: number; shards?: number[] }[]> {
  const losses = new Map<string, { t: number; shards?: number[] }[]>();
  for (const line of lines) {
    if (line.e !== 'lease-lost' && line.e !== 'fenced') continue;
    const k = `${line.g ?? DEFAULT_GROUP}/${line.h ?? line.m}`;
    const list = losses.get(k);
    if (list) list.push({ t: line.t, shards: line.shards });
    else losses.set(k, [{ t: line.t, shards: line.shards }]);
  }
  return losses;
}

/**
 * A run again after the first run's member lost the shard on its own, visibly (a `lease-lost` or
 * `fenced` event for it, between the first run's start and the second), with the first run's
 * acknowledgement never accepted: the documented redelivery of a lost lease (SPEC 5), not a fault
 * of the harness's making. On a loaded machine a heartbeat answered late loses a lease with no fault
 * injected: a manual-acks member's run that ended just after it could not be acknowledged and was run
 * again (by the same process, once it was granted the shard again) in the soak of a7497d4.
 */
function lostBetween(losses: Map<string, { t: number; shards?: number[] }[]>, first: Run, again: Run): boolean {
  if (first.acked) return false;
  return (losses.get(`${first.group}/${first.process}`) ?? []).some(
    (loss) =>
      loss.t >= first.start - EXPLAIN_BEFORE_MS &&
      loss.t <= again.start &&
      (loss.shards === undefined || loss.shards.includes(first.shard)),
  );
}

export function check(
  produced: Produced[],
  lines: RecordLine[],
  faults: Fault[],
  unacknowledged: Set<string>,
  extras: CheckExtras = {},
): CheckReport {
  const runs = collectRuns(lines);
  const groups = extras.groups ?? [...new Set(runs.map((r) => r.group))];
  if (groups.length === 0) groups.push(DEFAULT_GROUP);
  // Those in Redis at the end, and those an actor replayed or purged since it listed them.
  const deadLetters = everyDeadLetter(extras.deadLetters ?? [], extras.deadLetterOperations?.seen ?? []);
  const label = (g: string) => (groups.length > 1 || g !== DEFAULT_GROUP ? `${g}: ` : '');
  const open = (g: string, shard: number, id: string) =>
    unacknowledged.has(`${g}/${shard}/${id}`) ||
    (g === DEFAULT_GROUP && unacknowledged.has(`${shard}/${id}`)) ||
    (groups.length === 1 && unacknowledged.has(`${shard}/${id}`));
  const lossTimes = faults.filter((f) => f.dataLoss).map((f) => f.at);
  const unreplicated = faults.filter((f) => f.unreplicated);
  /** Redis may have lost it: written before it lost every key, or just before its master failed over unreplicated. */
  const redisMayHaveLost = (p: Produced) =>
    p.at !== undefined &&
    (lossTimes.some((t) => p.at! <= t) ||
      unreplicated.some((f) => (f.shards ?? []).includes(p.shard) && p.at! <= f.at && p.at! >= f.at - REPLICATION_WINDOW_MS));

  // Which process ran an entry last: a lost line names it (and so the kind of member it was).
  const lastRun = new Map<string, Run>();
  for (const run of runs) {
    const k = `${run.group}/${run.shard}/${run.id}`;
    const seen = lastRun.get(k);
    if (!seen || seen.start <= run.start) lastRun.set(k, run);
  }
  const lastRunBy = (g: string, entry: string) => {
    const run = lastRun.get(`${g}/${entry}`);
    return run ? `, last run by ${run.process}` : '';
  };
  // Entries found by key and sequence number where their id does not name them: a delayed entry
  // (its produced id is its schedule id), and every entry in a deferring group (copies get new ids).
  const deferring = new Set(extras.deferringGroups ?? []);
  const runsOfKey = new Map<string, Run[]>(); // "group key#seq" -> its runs, replays left out
  const streamIdsOfKey = new Map<string, Set<string>>(); // "key#seq" -> "shard/id" it ran from, in any group
  for (const run of runs) {
    if (run.replayOf) continue;
    const k = `${run.group} ${run.key}#${run.seq}`;
    const list = runsOfKey.get(k);
    if (list) list.push(run);
    else runsOfKey.set(k, [run]);
    const ids = streamIdsOfKey.get(`${run.key}#${run.seq}`);
    if (ids) ids.add(`${run.shard}/${run.id}`);
    else streamIdsOfKey.set(`${run.key}#${run.seq}`, new Set([`${run.shard}/${run.id}`]));
  }
  const byKeySeq = (g: string, p: Produced) => p.dueAt !== undefined || deferring.has(g);
  /** The stream entries a produced entry is: its own id, or (delayed) the ids it was released with, as its runs show. */
  const streamEntries = (p: Produced) =>
    p.dueAt === undefined ? [`${p.shard}/${p.id}`] : [...(streamIdsOfKey.get(`${p.key}#${p.seq}`) ?? [])];
  const lost: string[] = [];
  const redisLost: string[] = [];
  const skippedByReset: string[] = [];
  const forwardResets = offsetResets(faults).filter((r) => r.from !== null && compareStreamIds(r.to, r.from) > 0);
  const trimmedUnhandled: string[] = [];
  const trimmedAway = extras.trimmedAway ?? new Set<string>();
  let handled = 0;
  let acknowledged = 0;
  for (const g of groups) {
    const doneIds = new Set(runs.filter((r) => r.group === g && r.end !== undefined && r.ok).map((r) => `${r.shard}/${r.id}`));
    for (const d of deadLetters) if ((d.group || DEFAULT_GROUP) === g || groups.length === 1) doneIds.add(`${d.shard}/${d.id}`);
    const cannotRead = extras.unreadable?.get(g) ?? new Set<string>();
    for (const p of produced) {
      const entry = `${p.shard}/${p.id}`;
      if (streamEntries(p).some((e) => cannotRead.has(e))) continue;
      let isDone: boolean;
      let isOpen: boolean;
      if (byKeySeq(g, p)) {
        // Handled when any stream entry of its key#seq (the original, a release, a copy) was handled
        // to the end or dead-lettered; open while any of them is unacknowledged.
        const own = runsOfKey.get(`${g} ${p.key}#${p.seq}`) ?? [];
        isDone = doneIds.has(entry) || own.some((r) => doneIds.has(`${r.shard}/${r.id}`));
        isOpen = (p.dueAt === undefined && open(g, p.shard, p.id)) || own.some((r) => open(g, r.shard, r.id));
      } else {
        isDone = doneIds.has(entry);
        isOpen = open(g, p.shard, p.id);
      }
      if (isDone) handled += 1;
      if (!isOpen) acknowledged += 1;
      if (isDone && !isOpen) continue;
      // Written before Redis lost every key (or just before an unreplicated failover of its shard's
      // master), and not handled by then: Redis lost it, not the library.
      if (!isDone && redisMayHaveLost(p)) {
        redisLost.push(`${label(g)}${entry} (${p.key}#${p.seq})`);
        continue;
      }
      const skipped = (r: (typeof forwardResets)[number]) =>
        streamEntries(p).some((e) => skippedBy(r, Number(e.slice(0, e.indexOf('/'))), e.slice(e.indexOf('/') + 1)));
      if (!isDone && !isOpen && forwardResets.some((r) => (r.group || DEFAULT_GROUP) === g && skipped(r))) {
        skippedByReset.push(`${label(g)}${entry} (${p.key}#${p.seq})`);
        continue;
      }
      lost.push(`${label(g)}${entry} (${p.key}#${p.seq})${isOpen ? ' not acknowledged' : ''}${lastRunBy(g, entry)}`);
      if (!isDone && trimmedAway.has(entry)) trimmedUnhandled.push(`${label(g)}${entry} (${p.key}#${p.seq}) trimmed, never handled`);
    }
  }

  // Per-key order, per group: the first handling of each sequence number, in start order, never goes back.
  // An unordered resize gives up per-key order for entries on different shards written around it
  // (for a group reading them later, such as one created mid-run).
  const producedAt = new Map(produced.map((p) => [`${p.key}#${p.seq}`, p]));
  // A restart that lost every key is one too: the members recreate the stream with their configured
  // shard count, whatever it had grown or shrunk to, and producers re-route with no cutover.
  const unordered = faults
    .filter((f) => f.kind === 'grow-unordered' || f.kind === 'shrink-unordered' || f.kind === 'redis-flush-restart')
    .map((f) => f.at);
  /** `late` ran after `top` (the highest of its key that had started): excused by an unordered change between their writes? */
  const excused = (key: string, late: Run, top: Run) => {
    const pa = producedAt.get(`${key}#${late.seq}`);
    const pb = producedAt.get(`${key}#${top.seq}`);
    if (!pa || !pb || pa.at === undefined || pb.at === undefined) return false;
    // Written on either side of a loss of every key, and run by two members: even on one shard
    // index that is two streams, the lost one and the recreated one. The old owner still runs what
    // it had queued from the lost one until it learns (its lease looks safe through a quick
    // restart) while the recreated group's new owner runs the new one's (seen in lane 2:
    // "chaos-group: stale-27: 23 after 28 (shard 6, p0)", #23 written before the flush and run
    // after it by p0, #28 written after it and run first by p3). One member keeps a shard in order.
    const straddles = lossTimes.some((t) => Math.min(pa.at!, pb.at!) <= t && t < Math.max(pa.at!, pb.at!));
    if (straddles && late.member !== top.member) return true;
    // Written to one shard and run from one: a delayed entry (or a deferred copy) may be released
    // into another shard than it was written to, its key's shard after a resize.
    if (pa.shard === pb.shard && late.shard === top.shard) return false;
    const [from, to] = [Math.min(pa.at, pb.at) - UNORDERED_SLACK_MS, Math.max(pa.at, pb.at) + UNORDERED_SLACK_MS];
    return unordered.some((t) => t >= from && t <= to);
  };
  const orderViolations: string[] = [];
  const violations: OrderViolation[] = [];
  const sortedRuns = [...runs].sort((a, b) => a.start - b.start);
  /**
   * Per group and key, the first run of each sequence number among `chosen` never comes after a
   * later one's; "group/key#seq" reported in `known` are not reported again.
   */
  const inOrder = (chosen: Run[], what: string, known: Set<string>) => {
    const highest = new Map<string, Run>();
    const seen = new Set<string>();
    for (const run of chosen) {
      const entry = `${run.group}/${run.key}#${run.seq}`;
      // A dead letter's replay is a new entry after its key's newer ones, by design (docs/operations.md, Replay).
      if (seen.has(entry) || run.replayOf) continue;
      seen.add(entry);
      const top = highest.get(`${run.group}/${run.key}`);
      if (top && run.seq < top.seq && !excused(run.key, run, top) && !known.has(entry)) {
        known.add(entry);
        orderViolations.push(`${label(run.group)}${run.key}: ${run.seq} ${what} ${top.seq} (shard ${run.shard}, ${run.member})`);
        violations.push({ group: run.group, key: run.key, seq: run.seq, top: top.seq });
      }
      if (!top || run.seq > top.seq) highest.set(`${run.group}/${run.key}`, run);
    }
  };
  // reset-offsets: a run of what a reset moved the group back over, after the reset, is the re-read
  // the operator asked for (below), not a redelivery.
  const resets = offsetResets(faults);
  const replayed = (run: Run) =>
    resets.some((r) => (r.group || DEFAULT_GROUP) === run.group && r.resetAt <= run.start && rewound(r, run.shard, run.id));
  const reported = new Set<string>();
  // First runs: no entry is delivered after a later one of its key.
  inOrder(sortedRuns, 'after', reported);
  // First successful runs: no entry settles after a later one of its key. A retry in place holds its
  // key (its lane) until it succeeds, and with deferredOrder 'key' the key's later entries are parked
  // behind a deferral, so only this finds a deferred entry's copy run after its key's later entries.
  // A reset's re-read is left out: an entry dead-lettered before the reset and read again by it
  // settles after its key's later entries by the operator's word (the soak of 09bfcd1: key-33 #1282,
  // dead-lettered, read again by a reset a minute later, succeeded after #2376).
  inOrder(
    sortedRuns.filter((r) => r.ok && r.end !== undefined && !replayed(r)),
    'settled after',
    reported,
  );

  // Delayed entries: never released before their due time (the stream id's time, on Redis' clock as
  // the due time is: a run cannot start before its entry is in a stream); how late they were
  // released, and first run, are figures. Run times are not compared with the due time: they are
  // the members' monotonic clock, which drifts from Redis' over a long run.
  const early: string[] = [];
  const lateness: number[] = [];
  const releaseLateness: number[] = [];
  const idMs = (id: string) => Number(id.slice(0, id.indexOf('-')));
  for (const p of produced) {
    if (p.dueAt === undefined) continue;
    const released = [...(streamIdsOfKey.get(`${p.key}#${p.seq}`) ?? [])].map((e) => idMs(e.slice(e.indexOf('/') + 1)));
    if (released.length > 0) {
      const at = released.reduce((a, b) => Math.min(a, b), Infinity);
      if (at < p.dueAt) early.push(`${p.key}#${p.seq} (${p.shard}/${p.id}) released ${p.dueAt - at} ms before its due time`);
      else releaseLateness.push(at - p.dueAt);
    }
    for (const g of groups) {
      const first = (runsOfKey.get(`${g} ${p.key}#${p.seq}`) ?? []).reduce<Run | undefined>(
        (a, r) => (a && a.start <= r.start ? a : r),
        undefined,
      );
      if (first) lateness.push(first.start - p.dueAt);
    }
  }
  const p99 = (values: number[]) => {
    values.sort((a, b) => a - b);
    return values.length === 0 ? 0 : Math.round(values[Math.min(values.length - 1, Math.floor(values.length * 0.99))]);
  };
  // Not Math.max(...values): a 30-minute soak has more values than a call can take as arguments.
  const max = (values: number[]) => Math.round(values.reduce((a, b) => Math.max(a, b), values.length === 0 ? 0 : -Infinity));

  // One reader per shard: no run by another member may start while an acknowledged run is in flight.
  const overlaps: string[] = [];
  const byShard = new Map<string, Run[]>();
  for (const run of runs) {
    const k = `${run.group}/${run.shard}`;
    const list = byShard.get(k);
    if (list) list.push(run);
    else byShard.set(k, [run]);
  }
  for (const list of byShard.values()) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 0; i < list.length; i++) {
      const a = list[i];
      if (!a.acked || a.end === undefined) continue;
      for (let j = i + 1; j < list.length && list[j].start < a.end; j++) {
        // Two processes: two members, or two instances of one static member (the old one's ack counted).
        if (list[j].process !== a.process)
          overlaps.push(`${label(a.group)}shard ${a.shard}: ${a.process} ${a.id} and ${list[j].process} ${list[j].id}`);
      }
    }
  }

  // One run of a key of a shard at a time in a member process, lanes or not (SPEC 5: per-key order;
  // across shards an unordered resize may give it up).
  const keyOverlaps: string[] = [];
  const byKey = new Map<string, Run[]>();
  for (const run of runs) {
    const k = `${run.group}/${run.process}/${run.shard}/${run.key}`;
    const list = byKey.get(k);
    if (list) list.push(run);
    else byKey.set(k, [run]);
  }
  for (const list of byKey.values()) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 1; i < list.length; i++) {
      const before = list[i - 1];
      // A run whose process died has no end: nothing of it runs on after a restart (a new handle).
      if (before.end !== undefined && list[i].start < before.end)
        keyOverlaps.push(`${label(before.group)}${before.key}: ${before.process} ran #${before.seq} and #${list[i].seq} at once`);
    }
  }

  // reset-offsets: what a reset moved the group back over is read again; a run of it after the reset
  // is what the operator asked for, not a redelivery.
  // After the reset point (and not below what the stream kept then): a run of it after the reset is
  // the re-read the operator asked for. `from` is read before the move, so an entry delivered in
  // between is re-read too: only the expectation below is bounded by it.
  const notReplayed: string[] = [];
  for (const r of resets) {
    if (r.from === null) continue;
    // Redis lost every key after the reset (a restart without persistence): what the reset asked to
    // re-read was gone before the group could read it, as every entry written before a loss may be.
    if (lossTimes.some((t) => t >= r.resetAt)) continue;
    // A run still going at the reset counts: it finishes after it.
    const again = new Set(
      runs
        .filter(
          (run) => run.group === (r.group || DEFAULT_GROUP) && run.shard === r.shard && (run.end ?? Number.POSITIVE_INFINITY) >= r.resetAt,
        )
        .map((run) => run.id),
    );
    for (const p of produced)
      if (rewound(r, p.shard, p.id) && compareStreamIds(p.id, r.from) <= 0 && !again.has(p.id))
        notReplayed.push(
          `${label(r.group || DEFAULT_GROUP)}${p.shard}/${p.id} (${p.key}#${p.seq}) not handled again after the reset to ${r.to}`,
        );
  }

  // Duplicates: every run of an entry after its first that did not fail on purpose (a failed
  // attempt is retried, which is no redelivery), each explained by a fault at that moment.
  const firstRun = new Map<string, Run>();
  const losses = ownLosses(lines);
  let duplicates = 0;
  const unexplainedDuplicates: string[] = [];
  for (const run of [...runs].sort((a, b) => a.start - b.start)) {
    const entry = `${run.group}/${run.shard}/${run.id}`;
    const first = firstRun.get(entry);
    if (!first) {
      if (run.ok) firstRun.set(entry, run);
      continue;
    }
    duplicates += 1;
    if (replayed(run)) continue;
    const explained = faults.some(
      (f) =>
        REDELIVERING.has(f.kind) &&
        (f.until ?? f.at) >= first.start - EXPLAIN_BEFORE_MS &&
        f.at <= run.start &&
        (GLOBAL.has(f.kind) || f.target === first.member || f.target === run.member || (f.shards ?? []).includes(run.shard)),
    );
    if (!explained && !lostBetween(losses, first, run))
      unexplainedDuplicates.push(
        `${label(run.group)}${run.shard}/${run.id}: ${first.member} at ${first.start.toFixed(0)}, again by ${run.member} at ${run.start.toFixed(0)}`,
      );
  }

  const report: CheckReport = {
    produced: produced.length,
    handled,
    acknowledged,
    lost,
    redisLost,
    skippedByReset,
    trimmedUnhandled,
    orderViolations,
    early,
    deferrals: { deferred: lines.filter((l) => l.e === 'deferred').length, parked: lines.filter((l) => l.e === 'parked').length },
    delayed: {
      count: produced.filter((p) => p.dueAt !== undefined).length,
      releaseLateP99Ms: p99(releaseLateness),
      releaseLateMaxMs: max(releaseLateness),
      lateP99Ms: p99(lateness),
      lateMaxMs: max(lateness),
    },
    orderEvidence: violations.slice(0, 3).flatMap((v) => orderEvidence(v, produced, runs, faults, extras.resizeHistory)),
    overlaps,
    keyOverlaps,
    duplicates,
    unexplainedDuplicates,
    stuck: stuckEntries(runs, extras.pendingSamples ?? [], extras.stuckAfterMs ?? 3000, extras.quietStuckAfterMs, extras.lanes ?? false),
    deadLetters: deadLetters.length,
    unfencedDeadLetters: deadLetterFencing(lines, deadLetters, faults),
    grantDuplicates: grantDuplicates(runs.filter((run) => !replayed(run))),
    notReplayed,
    writtenTwice: writtenTwice(runs, extras.mayBeTwice ?? new Set(), deferring, lossTimes),
    producerStalls: extras.producerStalls ?? [],
    deadLetterOutcomes: extras.deadLetterOperations
      ? deadLetterOutcomes({
          operations: extras.deadLetterOperations,
          listedAtEnd: extras.deadLetters ?? [],
          writes: extras.replayWrites ?? [],
          runs,
          unacknowledged: (g, shard, id) => open(g, shard, id),
          faults,
        })
      : [],
    unrecovered: faults
      .filter((f) => f.failed)
      .map((f) => `${f.kind}${f.target ? ` ${f.target}` : ''}${f.detail ? ` ${f.detail}` : ''}: ${f.failed}`),
    ...transportReport(extras.transportEpisodes),
    kinds: [],
    faults,
  };
  if (extras.memberKinds) {
    const problems = [
      ...report.lost,
      ...report.orderViolations,
      ...report.early,
      ...report.overlaps,
      ...report.keyOverlaps,
      ...report.unexplainedDuplicates,
      ...report.stuck,
      ...report.unfencedDeadLetters,
      ...report.grantDuplicates,
      ...report.writtenTwice,
      ...report.unrecovered,
      ...report.notReplayed,
      ...report.deadLetterOutcomes,
    ];
    report.kinds = reportPerKind(extras.memberKinds, runs, lines, deadLetters, problems);
  }
  return report;
}

function transportReport(episodes: TransportEpisode[] | undefined): Pick<CheckReport, 'transport' | 'transportFigures'> {
  if (!episodes) return { transport: [], transportFigures: emptyTransportFigures() };
  const { problems, figures } = transportOutcomes(episodes);
  return { transport: problems, transportFigures: figures };
}

/** The dead letters at the end and those seen before (replayed or purged since), each once. */
function everyDeadLetter(atEnd: DeadLetter[], seen: DeadLetter[]): DeadLetter[] {
  const byName = new Map<string, DeadLetter>();
  for (const d of [...atEnd, ...seen]) byName.set(`${d.group}/${d.ref ?? `${d.shard}/${d.id}/${d.member}/${d.t}`}`, d);
  return [...byName.values()];
}
