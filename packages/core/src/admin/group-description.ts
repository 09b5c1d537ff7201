import type {
  GroupDescription,
  GroupState,
  MemberMetadata,
  MemberState,
  ScheduleDueTimes,
  ShardDescription,
  ShardRef,
} from '../protocol/records';
import { parseShardCsv } from '../redis/responses';

export interface ShardStats {
  lag: number;
  pending: number;
  /** Entries in the shard's schedule (delayed delivery), the group's deferred retries on it and its entries parked behind them. */
  scheduled: number;
  deferred: number;
  parked: number;
  /** When each schedule's first entry is due (Redis ms), null when it is empty (parked entries are in the deferred one). */
  nextDueAt: ScheduleDueTimes;
}

const NO_STATS: ShardStats = { lag: 0, pending: 0, scheduled: 0, deferred: 0, parked: 0, nextDueAt: { scheduled: null, deferred: null } };

/** The raw snapshot `describeGroup-14.lua` returns, as maps. */
export interface GroupSnapshot {
  streamPrefix: string;
  consumerGroup: string;
  stream: Map<string, string>;
  group: Map<string, string>;
  members: [string, string][];
  leases: Map<string, string>;
  target: [string, string][];
  owners: Map<string, string>;
  state: string;
  /** Redis' clock (ms) in the describe script's run. */
  describedAt: number;
  /** Lag and pending of every shard 0..span-1 (readable or not). */
  shardStats: Map<number, ShardStats>;
}

/** The stored member record (see includes/members.lua). */
interface StoredMember {
  id: string;
  name: string;
  state: MemberState;
  epoch: number;
  mv: number;
  rmc: number;
  acw: number;
  weight: number;
  st: number;
  owned: string;
  revoking: string;
  lastHb: number;
  leaseExp: number;
  /** Static membership (includes/static.lua): set for a member started with a memberInstanceId. */
  static?: boolean;
  /** When a static member departed (its stop()); cleared when an instance rejoins. */
  awayAt?: number;
  /** When a join not proven yet was taken (includes/unproven.lua); cleared by its proof or the member's end. */
  unproven?: number;
}

const iso = (ms: number): string => new Date(ms).toISOString();
const refs = (csv: string | undefined): ShardRef[] => parseShardCsv(csv).map((shardIndex) => ({ shardIndex }));

function toMember(record: StoredMember, leaseScore: string | undefined): MemberMetadata {
  // An ACTIVE member's lease lives in the leases index (the steady-state heartbeat writes only that).
  const leaseExpiresAt = record.state === 'ACTIVE' && leaseScore !== undefined ? Number(leaseScore) : record.leaseExp;
  return {
    memberId: record.id,
    memberName: record.name,
    state: record.state,
    memberEpoch: record.epoch,
    metadataVersion: record.mv,
    runtimeMaxConcurrency: record.rmc,
    activeConsumerWorkers: record.acw,
    weight: record.weight,
    currentAssignment: refs(record.owned),
    revoking: refs(record.revoking),
    lastHeartbeatAt: iso(leaseExpiresAt - record.st),
    memberLeaseExpiresAt: iso(leaseExpiresAt),
    memberInstanceId: record.static ? record.id : null,
    departedAt: record.awayAt === undefined ? null : iso(record.awayAt),
    // A departed member keeps its membership and shards until its lease ends (includes/static.lua).
    awaitedUntil: record.awayAt !== undefined && record.state === 'ACTIVE' ? iso(leaseExpiresAt) : null,
    unprovenSince: record.unproven === undefined ? null : iso(record.unproven),
  };
}

/**
 * The shards a group reads: its own set while a resize is in progress for it, else every shard of
 * the current count (includes/stream.lua).
 */
export function groupReadableShards(stream: Map<string, string>, group: Map<string, string>): number[] {
  const own = group.get('readableShardSet');
  if (own !== undefined) return parseShardCsv(own);
  return Array.from({ length: Number(stream.get('shardCount') ?? 0) }, (_, i) => i);
}

/** Builds the SPEC section 2 JSON shapes from a snapshot. Pure. */
export function toGroupDescription(s: GroupSnapshot): GroupDescription {
  const members = s.members
    .map(([, json]) => JSON.parse(json) as StoredMember)
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((record) => toMember(record, s.leases.get(record.id)));
  const byId = new Map(members.map((m) => [m.memberId, m]));
  const readableShardSet = groupReadableShards(s.stream, s.group);
  const assignmentEpoch = Number(s.group.get('assignmentEpoch'));

  // Every shard that may hold entries for the group (SPEC 9.6), readable or not: a backlog the
  // group cannot read yet is still a backlog.
  const shardCount = Number(s.stream.get('shardCount'));
  const readable = new Set(readableShardSet);
  const span = Math.max(shardCount, Number(s.stream.get('shardSpan') ?? 0), ...readableShardSet.map((i) => i + 1));
  const shards: ShardDescription[] = Array.from({ length: span }, (_, shardIndex) => {
    const owner = s.owners.get(String(shardIndex)) ?? null;
    const revoking = owner !== null && byId.get(owner)?.revoking.some((r) => r.shardIndex === shardIndex);
    const stats = s.shardStats.get(shardIndex) ?? NO_STATS;
    const readability = readable.has(shardIndex)
      ? shardIndex < shardCount
        ? 'readable'
        : 'draining'
      : shardIndex < shardCount
        ? 'not-yet-readable'
        : 'drained';
    return {
      shardIndex,
      readability,
      owner,
      state: owner === null ? 'UNOWNED' : revoking ? 'REVOKING' : 'OWNED',
      lag: stats.lag,
      pending: stats.pending,
      backlog: stats.lag + stats.pending,
      scheduled: stats.scheduled,
      deferred: stats.deferred,
      nextDueAt: { ...stats.nextDueAt },
      parked: stats.parked,
    };
  });

  return {
    group: {
      streamPrefix: s.streamPrefix,
      consumerGroup: s.consumerGroup,
      groupEpoch: Number(s.group.get('groupEpoch')),
      metadataVersion: Number(s.stream.get('metadataVersion')),
      assignmentEpoch,
      state: s.state as GroupState,
      shardCount: Number(s.stream.get('shardCount')),
      readableShardSet,
      updatedAt: iso(Number(s.group.get('updatedAt'))),
      cutoverInProgress: s.group.has('cutover'),
      notYetReadableBacklog: shards.filter((x) => x.readability === 'not-yet-readable').reduce((sum, x) => sum + x.backlog, 0),
      scheduled: shards.reduce((sum, x) => sum + x.scheduled, 0),
      deferred: shards.reduce((sum, x) => sum + x.deferred, 0),
      parked: shards.reduce((sum, x) => sum + x.parked, 0),
      nextDueAt: {
        scheduled: earliest(shards.map((x) => x.nextDueAt.scheduled)),
        deferred: earliest(shards.map((x) => x.nextDueAt.deferred)),
      },
      describedAt: s.describedAt,
    },
    members,
    targetAssignment: {
      streamPrefix: s.streamPrefix,
      consumerGroup: s.consumerGroup,
      assignmentEpoch,
      groupEpoch: assignmentEpoch,
      members: Object.fromEntries(s.target.map(([memberId, csv]) => [memberId, refs(csv)])),
    },
    shards,
  };
}

/** The earliest of some due times, null when there is none. A loop, not Math.min(...): a stream may have 8,192 shards. */
function earliest(times: (number | null)[]): number | null {
  let first: number | null = null;
  for (const time of times) if (time !== null && (first === null || time < first)) first = time;
  return first;
}
