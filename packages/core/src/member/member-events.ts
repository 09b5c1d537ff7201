import type { ErrorCode } from '../protocol/error-codes';
import type { AcknowledgedEvent, DeferredEvent, ParkedEvent, ReleasedEvent } from './shard-state';
import type { AckRefusedEvent } from './consumption-errors';
import type { DeadLetterEvent } from './handle/dead-letter-options';

export interface ShardsEvent {
  shards: number[];
  memberEpoch: number;
}

export interface MemberEvents {
  /** Shards this member may now read (after taking over their pending entries). */
  assigned: [ShardsEvent];
  /** Shards this member gave up (its in-flight work on them finished or timed out). */
  revoked: [ShardsEvent];
  /**
   * The coordinator refused this member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, or GROUP_NOT_FOUND
   * after Redis lost the group's keys): it dropped everything and rejoins.
   */
  fenced: [{ errorCode: ErrorCode; message: string; shards: number[]; memberEpoch: number }];
  /** No heartbeat succeeded for too long: the member stopped before its lease could be given away, and rejoins. */
  'lease-lost': [{ shards: number[]; memberEpoch: number; sinceLastHeartbeatMs: number }];
  error: [Error];
  'dead-letter': [DeadLetterEvent];
  /** A failed entry was retried deferred: acknowledged and put in the group's durable schedule until `dueAt` (docs/runtime.md, Deferred retries). */
  deferred: [DeferredEvent];
  /** This member released due entries of a shard (delayed entries, the group's deferred retries) into its stream: `count` of them, in one call. */
  released: [ReleasedEvent];
  /** An entry was acknowledged and parked behind its key's deferred retry, in the group's schedule (deferredOrder 'key'). */
  parked: [ParkedEvent];
  /** Acknowledgements sent for a shard; `accepted` is false when a newer owner's fencing token refused them. */
  acknowledged: [AcknowledgedEvent];
  /** ackMode 'manual': a `message.ack()`/`nack()` that could not count (the entry runs again); also counted in `stats().refusedAcks`. */
  'ack-refused': [AckRefusedEvent];
}
