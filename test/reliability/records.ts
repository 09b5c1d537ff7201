/** What the reliability harness records and the checker reads: writes, member records, faults, dead letters, pending samples, runs. */
export interface Produced {
  id: string;
  shard: number;
  key: string;
  seq: number;
  /** When the write was acknowledged to the producer (wall-clock ms). Needed to tell entries Redis lost. */
  at?: number;
  /**
   * A delayed entry (`delayMs`): its due time (epoch ms, Redis' clock, the host's), and `id` is its
   * id in the shard's schedule; it gets a stream id when released, so the checker finds its runs by
   * key and sequence number. It must not run before `dueAt`.
   */
  dueAt?: number;
}

/** One line of a member process's record file (packages/core/src/testing/member-process.ts). */
export interface RecordLine {
  e: string;
  t: number;
  m: string;
  /** Consumer group (absent in single-group records: the default group). */
  g?: string;
  /** The process, when another one may run with the same member id `m` (a static member restarted). */
  h?: string;
  ep?: number;
  s?: number;
  id?: string;
  k?: string;
  q?: number;
  dc?: number;
  n?: number;
  ids?: string[];
  ok?: boolean;
  ge?: number;
  shards?: number[];
  msg?: string;
  /** stats().problems (e: 'problems'). */
  lines?: string[];
  /** A replayed entry's `rsc-replay-of` (the dead letter's ref) and `rsc-replay-group` headers (e: 'start'). */
  rp?: string;
  rg?: string;
  /** e: 'deferred' | 'parked': when the entry is due again (epoch ms). */
  due?: number;
}

export type FaultKind =
  | 'kill'
  | 'pause'
  | 'graceful'
  | 'join'
  | 'redis-restart'
  | 'partition'
  | 'reset'
  | 'latency-low'
  | 'latency-session'
  | 'latency-beyond'
  | 'jitter'
  | 'lost-read'
  | 'lost-ack'
  | 'lost-heartbeat'
  | 'dead-letter-wrongtype'
  | 'dead-letter-oom'
  | 'long-graceful'
  | 'grow-ordered'
  | 'grow-unordered'
  | 'shrink-ordered'
  | 'shrink-unordered'
  | 'new-group'
  | 'delete-drained'
  | 'stale-producer'
  | 'redis-flush-restart'
  | 'clock-skew'
  | 'duplicate-id'
  | 'partial-batch'
  | 'unsafe-lease'
  | 'zombie-dead-letter'
  | 'revoke-twice'
  | 'group-keys-lost'
  // The seams (seam-faults.ts): one-way, on one connection, during stop().
  | 'late-answers'
  | 'late-join'
  | 'half-open-commands'
  | 'half-open-reads'
  | 'half-open-acks'
  | 'half-open-wake'
  | 'freeze-on-stop'
  // Operations as actors (operation-faults.ts).
  | 'reset-offsets'
  | 'delete-resize-back'
  | 'dead-letter-replay'
  | 'dead-letter-purge'
  // The Nest transport as actors (transport-actors.ts).
  | 'transport'
  // Member kinds (member-kinds.ts): a static member's next instance.
  | 'static-restart'
  // On a Redis Cluster only (docs/reliability-cluster.md):
  | 'failover'
  | 'slot-move';

export interface Fault {
  kind: FaultKind;
  /** The member process it hit (none for a Redis restart): duplicates are explained by it. */
  target?: string;
  /** What else the report says about it (the entry, the shards, the epochs). */
  detail?: string;
  at: number;
  /** When the group was STABLE again with every shard owned by a running member (ms after `at`). */
  recoveryMs?: number;
  /** Why the group did not recover from it (the harness gave up waiting); a broken promise. */
  failed?: string;
  /** With `failed`: what each member process did since the fault began (member-report.ts), one line each. */
  members?: string[];
  /**
   * When the fault was lifted (wall-clock ms; the harness sets it for every fault): it may redeliver
   * a run begun at any moment until then. Absent: it ended at `at`.
   */
  until?: number;
  /** Redis lost every key at `at` (a restart without persistence). */
  dataLoss?: boolean;
  /**
   * reset-offsets: per shard moved back, from and to which last-delivered id, and the oldest entry
   * the shard stream kept then (`resetAt`: when it was made, wall-clock ms). What lies after `to` up
   * to `from` (and not below `oldest`) must be handled again after `resetAt`; its runs then are no
   * redelivery to explain.
   */
  resets?: OffsetReset[];
  /**
   * The shards whose master failed over at `at` (every shard when it also served the coordinator's
   * keys): a redelivery on one of them is explained whoever ran it, since what the old master had
   * not yet passed to its replica (a delivery, an ack not waited for) is undone.
   */
  shards?: number[];
  /**
   * Writes to `shards` that Redis confirmed without waiting for a replica may be gone after the
   * failover at `at` (asynchronous replication): set when the producers did not use
   * `waitForReplicas`. With it, a confirmed write is never lost, and a missing one is a loss.
   */
  unreplicated?: boolean;
}

/** One dead-letter stream entry, as the harness read it from Redis at the end. */
export interface DeadLetter {
  group: string;
  /** `<shardIndex>/<deadLetterId>`, the name replay and purge take (absent in data made before it was read). */
  ref?: string;
  shard: number;
  /** The dead-lettered entry's id in its shard stream. */
  id: string;
  /** The member that wrote it (its `memberId` field). */
  member: string;
  /** Redis time of the write (the dead-letter entry id's milliseconds). */
  t: number;
}

/** What the harness saw pending on one shard for one group at one moment. */
export interface PendingSample {
  t: number;
  group: string;
  shard: number;
  /** The shard's owner by the coordinator's record at that moment. */
  owner: string | null;
  /** The owner runs, is reachable and under no fault (so it has no excuse to leave work pending). */
  ownerLive: boolean;
  pending: { id: string; consumer: string }[];
}

export interface Run {
  group: string;
  member: string;
  /** The process that ran it: its member id, or its record's `h` when another process may share that id (a static member's instances). */
  process: string;
  shard: number;
  id: string;
  key: string;
  seq: number;
  start: number;
  /** Undefined when the process died (or was never resumed) before the handler ended. */
  end?: number;
  /** False when the handler threw (a failure the member retries or dead-letters). */
  ok: boolean;
  /** The grant (the epoch the shard was assigned at) the run happened under, as its member recorded it. */
  grant?: number;
  /**
   * When the member recorded the `assigned` line that began that grant. An epoch alone does not name
   * a grant: a recreated group (its keys lost or flushed) counts epochs from 1 again, so one member can
   * hold "grant 3" twice, with different fencing tokens.
   */
  grantAt?: number;
  /** Whether an acknowledgement of this entry by this member (under this grant) was accepted. */
  acked: boolean;
  /**
   * A dead letter's replay (a new entry of the same key and payload, dead-letter-faults.ts): the
   * ref it replays and the group whose dead letter it was. Not a write of the producer: its key and
   * sequence number are the original's, after newer ones.
   */
  replayOf?: { ref: string; group: string };
}

/** One shard a reset-offsets fault moved back (`Fault.resets`). */
export interface OffsetReset {
  group: string;
  shard: number;
  from: string | null;
  to: string;
  /** The shard stream's oldest entry when the reset was made (none: empty). */
  oldest: string | undefined;
  resetAt: number;
}

/**
 * What the dead-letter actors (dead-letter-faults.ts) did: every dead letter they saw listed, and
 * which ones they asked to replay or to purge, each by "group ref" (`deadLetterKey`).
 */
export interface DeadLetterOperations {
  /** Every dead letter a replay or purge actor listed before acting, with its `ref`. */
  seen: DeadLetter[];
  replayAsked: Set<string>;
  purgeAsked: Set<string>;
  /** What a replay answered it wrote or found ("shard/id" by "group ref"): that entry must exist. */
  answered: Map<string, string>;
}

/** One entry in a shard stream that replays a dead letter (its `rsc-replay-of` and `rsc-replay-group` headers). */
export interface ReplayWrite {
  group: string;
  ref: string;
  shard: number;
  id: string;
}

/** "group ref": how a dead letter is named across the actors' records and the checker. */
export const deadLetterKey = (group: string, ref: string) => `${group} ${ref}`;

/** One line of a transport process's record file (packages/nestjs/src/testing/transport-process.ts). */
export interface TransportLine {
  e: string;
  t: number;
  r: 'server' | 'client';
  /** The request's or event's sequence number (negative: a forged request). */
  q?: number;
  s?: number;
  id?: string;
  /** A reply's value (the sequence number the server answered with). */
  v?: number;
  /** An acknowledgement's stream prefix, its ids and whether the fencing check accepted it. */
  st?: string;
  ids?: string[];
  ok?: boolean;
  name?: string;
  msg?: string;
  [field: string]: unknown;
}

/** A fault on one transport actor's link (transport-actors.ts), wall-clock ms. */
export interface TransportLinkFault {
  link: 'server' | 'client';
  what: string;
  at: number;
  until: number;
  /** It may make a handler run again (a connection cut or reset with calls unanswered on it). */
  redelivers: boolean;
}

/** One run of the transport kind (transport-actors.ts): what its processes recorded and what the harness found in Redis. */
export interface TransportEpisode {
  at: number;
  /** The client's `timeoutMs`. */
  timeoutMs: number;
  requestStream: string;
  eventStream: string;
  server: TransportLine[];
  client: TransportLine[];
  /** The forged requests: their entry and the key their `rsc-reply-to` named. */
  forged: { shard: number; id: string; replyTo: string }[];
  /** A forged request's target that is not as it was (a reply written there): must be none. */
  targetsTouched: string[];
  /** Reply entries (fields `q` and `r`) found in a key that is not an inbox of the transport: must be none. */
  strayReplies: string[];
  /** "stream shard/id" of the event stream's entries the group had not acknowledged when the server stopped. */
  unacknowledged: string[];
  linkFaults: TransportLinkFault[];
}
