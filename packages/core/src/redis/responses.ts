import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { compareStreamIds } from '../protocol/stream-ids';
import type { AssignmentInput, HeartbeatResponse } from '../protocol/heartbeat';
import type { GroupState } from '../protocol/records';

/** "1,3,8" -> [1, 3, 8]; the wire and storage form of shard lists (canonical CSV). */
export function parseShardCsv(csv: unknown): number[] {
  if (typeof csv !== 'string' || csv === '') return [];
  return csv.split(',').map(Number);
}

/** [3, 1, 8] -> "1,3,8": sorted, as the scripts expect; non-integers pass through for them to refuse. */
export function toShardCsv(shards: readonly number[] | undefined): string {
  if (!shards || shards.length === 0) return '';
  return [...shards].sort((a, b) => a - b).join(',');
}

/** Flat [k1, v1, k2, v2] (HGETALL, WITHSCORES) -> object; cjson encodes an empty table as {}. */
/** A consumer group's position on one stream, as XINFO GROUPS tells it. */
export interface StreamGroupInfo {
  lastDelivered: string;
  pending: number;
  /** Undelivered entries; null where Redis cannot tell (after deletions, trimming or an AOF restart). */
  lag: number | null;
  /** Entries the group has read from the stream in all (Redis 7 `entries-read`); null where Redis does not say. */
  entriesRead: number | null;
}

/** The group's entry in an XINFO GROUPS reply, or undefined when the group has never read the stream. */
export function findGroupInfo(reply: unknown, consumerGroup: string): StreamGroupInfo | undefined {
  for (const entry of (reply as unknown[]) ?? []) {
    const fields = new Map(pairs(entry));
    if (fields.get('name') !== consumerGroup) continue;
    return {
      lastDelivered: fields.get('last-delivered-id') ?? '0-0',
      pending: Number(fields.get('pending') ?? 0),
      lag: optionalCount(fields.get('lag')),
      entriesRead: optionalCount(fields.get('entries-read')),
    };
  }
  return undefined;
}

/**
 * The group's lag as far as Redis' own figure can be trusted: 0 once the group was delivered
 * `lastEntryId` (the stream's last entry; undefined for an empty stream), else Redis' figure but at
 * least 1 (null where Redis cannot tell). Redis before 7.4 keeps counting entries the group was
 * delivered once the stream was trimmed past its last-delivered id (redis/redis#13957): a drained
 * shard showed lag for good, and deleteDrainedShards refused it for good.
 */
export function trustedLag(info: StreamGroupInfo, lastEntryId: string | undefined): number | null {
  if (lastEntryId === undefined || compareStreamIds(info.lastDelivered, lastEntryId) >= 0) return 0;
  return info.lag === null ? null : Math.max(1, info.lag);
}

/** A count XINFO may leave out or give as nil (RESP2 '' or 'null' once stringified). */
function optionalCount(value: string | undefined): number | null {
  return value === undefined || value === '' || value === 'null' ? null : Number(value);
}

/** XINFO on a stream that does not exist fails with "no such key". */
export function isNoSuchKey(error: unknown): boolean {
  return /no such key/i.test(String(error));
}

export function pairs(flat: unknown): [string, string][] {
  if (!Array.isArray(flat)) return [];
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([String(flat[i]), String(flat[i + 1])]);
  return out;
}

function parseAssignmentInput(json: string): AssignmentInput {
  const raw = JSON.parse(json) as {
    groupEpoch: number;
    members: unknown;
    readableShardSet: string;
    previousTarget: unknown;
  };
  return {
    groupEpoch: raw.groupEpoch,
    members: pairs(raw.members)
      .map(([memberId, weight]) => ({ memberId, weight: Number(weight) }))
      .sort((a, b) => (a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0)),
    readableShardSet: parseShardCsv(raw.readableShardSet),
    previousTarget: Object.fromEntries(pairs(raw.previousTarget).map(([id, csv]) => [id, parseShardCsv(csv)])),
  };
}

/** Parses the array that `includes/respond.lua` builds (or the two-element error form). */
export function parseHeartbeatReply(reply: unknown): HeartbeatResponse {
  const r = reply as unknown[];
  const errorCode = errorCodeFromWire(r[0]);
  if (errorCode !== ErrorCode.NONE) {
    return {
      errorCode,
      errorMessage: String(r[1]),
      memberEpoch: -1,
      heartbeatIntervalMs: 0,
      sessionTimeoutMs: 0,
      assignedShards: [],
      revokeShards: [],
      pendingShards: [],
      groupEpoch: -1,
      assignmentEpoch: -1,
      state: 'EMPTY',
      metadataVersion: -1,
      shardCount: 0,
      computeAssignment: false,
      incarnation: '0',
      // Every refusal carries it (third element): the member bounds Redis's clock with it, and one
      // received in time proves the link to its next join (HeartbeatRequest.answeredAt).
      serverTimeMs: serverTime(r[2]),
    };
  }
  const computeAssignment = Number(r[14]) === 1;
  return {
    errorCode,
    errorMessage: '',
    memberEpoch: Number(r[2]),
    heartbeatIntervalMs: Number(r[3]),
    sessionTimeoutMs: Number(r[4]),
    assignedShards: parseShardCsv(r[5]),
    revokeShards: parseShardCsv(r[6]),
    pendingShards: parseShardCsv(r[7]),
    groupEpoch: Number(r[8]),
    assignmentEpoch: Number(r[9]),
    state: String(r[10]) as GroupState,
    metadataVersion: Number(r[11]),
    shardCount: Number(r[12]),
    readableShardSet: r[13] == null ? undefined : parseShardCsv(r[13]),
    computeAssignment,
    assignmentInput: computeAssignment ? parseAssignmentInput(String(r[15])) : undefined,
    incarnation: r[16] == null ? '0' : String(r[16]),
    serverTimeMs: serverTime(r[17]),
    unproven: Number(r[18]) === 1,
  };
}

function serverTime(value: unknown): number | undefined {
  const ms = Number(value);
  return value == null || !Number.isFinite(ms) ? undefined : ms;
}

export interface CommitResult {
  /** The committing member's heartbeat response (its own errorCode refers to the member, not the commit). */
  response: HeartbeatResponse;
  commitResult: ErrorCode;
  commitMessage: string;
}

/** The commit script answers with the member's heartbeat response (19 elements) plus the commit's own outcome. */
export function parseCommitReply(reply: unknown): CommitResult {
  const r = reply as unknown[];
  const response = parseHeartbeatReply(r);
  if (response.errorCode !== ErrorCode.NONE) {
    return { response, commitResult: ErrorCode.NONE, commitMessage: '' };
  }
  return { response, commitResult: errorCodeFromWire(r[19]), commitMessage: String(r[20]) };
}
