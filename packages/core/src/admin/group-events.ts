import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';

/** One decision of the coordinator from a group's event log (docs/protocol.md lists the types). */
export interface GroupEvent {
  /** The event's id in the log; pass it as `after` to read on from there. */
  id: string;
  /** When it was logged (Redis time), ISO 8601. */
  at: string;
  type: string;
  memberId: string;
  groupEpoch: number;
  assignmentEpoch: number;
  detail: string;
}

export interface ReadGroupEventsOptions {
  /** Only events after this id. Default: the newest `count` events. */
  after?: string;
  /** At most this many. Default 100. */
  count?: number;
  /**
   * With `after`: wait up to this long for a first event when there is none yet (XREAD BLOCK; it
   * holds the connection meanwhile, give it one of its own). Default 0: do not wait.
   */
  blockMs?: number;
}

export async function readGroupEvents(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  options: { after?: string; count: number; blockMs: number },
): Promise<GroupEvent[]> {
  const log = keys.groupEvents(streamPrefix, consumerGroup);
  if (options.after === undefined) {
    return (await redis.xrevrange(log, '+', '-', 'COUNT', options.count)).reverse().map(toEvent);
  }
  if (options.blockMs <= 0) return (await redis.xrange(log, `(${options.after}`, '+', 'COUNT', options.count)).map(toEvent);
  const reply = await redis.xread('COUNT', options.count, 'BLOCK', options.blockMs, 'STREAMS', log, options.after);
  return (reply?.[0]?.[1] ?? []).map(toEvent);
}

function toEvent([id, flat]: [string, string[]]): GroupEvent {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i], flat[i + 1]);
  return {
    id,
    at: new Date(Number(id.split('-')[0])).toISOString(),
    type: fields.get('type') ?? '',
    memberId: fields.get('memberId') ?? '',
    groupEpoch: Number(fields.get('groupEpoch') ?? 0),
    assignmentEpoch: Number(fields.get('assignmentEpoch') ?? 0),
    detail: fields.get('detail') ?? '',
  };
}
