export * from './protocol/error-codes';
export * from './protocol/errors';
export * from './protocol/heartbeat';
export * from './protocol/records';
export * from './protocol/names';
export { checkOption, OPTION_RANGES, type OptionRange, type OptionRangeName } from './protocol/option-ranges';
export type { ShardAssignor } from './assignor/assignor';
export { StickyAssignor } from './assignor/sticky-assignor';
export { findPlanViolation } from './assignor/validate-plan';
export { KeyBuilder, DEFAULT_KEY_PREFIX, type GroupKeys } from './redis/keys';
export type { RedisClient } from './redis/scripts';
export type { CoordinatorOptions } from './redis/coordinator-options';
export type { CommitResult } from './redis/responses';
export { CoordinatorClient, DEFAULT_SESSION_TIMEOUT_MS, DEFAULT_REBALANCE_TIMEOUT_MS } from './redis/coordinator-client';
export {
  CoordinatorAdmin,
  MAX_SHARD_COUNT,
  type CreateStreamOptions,
  type GroupCutoverStatus,
  type ResizeResult,
  type ResizeShardsOptions,
} from './admin/coordinator-admin';
export type { Cutover, CutoverProgress, CutoverWait } from './admin/cutover';
export {
  type DeadLetter,
  type DeadLetterFilter,
  type ReadDeadLettersOptions,
  deadLetterRef,
  parseDeadLetterRef,
} from './admin/dead-letters';
export { DeadLetterReplayError, REPLAY_HEADER, type DeadLetterReplay, type ReplayDeadLettersOptions } from './admin/dead-letter-replay';
export type { DeadLetterPurge } from './admin/dead-letter-purge';
export type { GroupEvent, ReadGroupEventsOptions } from './admin/group-events';
export type { OffsetTarget, ResetOffsetsOptions, ResetOffsetsResult, ShardOffsetReset } from './admin/offsets';
export type { ShardPosition } from './admin/shard-positions';
export type { ReadScheduleOptions, ScheduledEntry, ScheduleDrop, SchedulePage, ScheduleRelease, ScheduleTarget } from './admin/schedules';
export { TrimError, type ShardTrim, type TrimOptions, type TrimResult } from './admin/retention';
export {
  TrimSchedule,
  type PeriodicTrimOptions,
  type TrimRun,
  type TrimScheduleEvents,
  type TrimScheduleStats,
} from './admin/periodic-trim';
export { compareStreamIds, nextStreamId } from './protocol/stream-ids';
export * from './protocol/entry-format';
export type { StandardSchemaIssue, StandardSchemaResult, StandardSchemaV1 } from './protocol/standard-schema';
export { shardForKey, jumpConsistentHash, fnv1a64 } from './producer/key-hash';
export { StreamProducer, type StreamProducerOptions } from './producer/stream-producer';
export { PartialBatchError, type FailedEntry, type SendResult, type WrittenEntry } from './producer/send-results';
export { NotReplicatedError, type ReplicaWait } from './redis/connection/replica-wait';
export { LOADING_RETRY_MS } from './redis/connection/connection-defaults';
export { ReadDeadlineError, withReadDeadline } from './redis/connection/read-deadline';
export { isReadonlyError, reconnectOnReadonly } from './redis/connection/readonly-reconnect';
export { CoordinatedMember, type MemberEvents, type ShardsEvent, type StopOptions } from './member/coordinated-member';
export type {
  BatchMemberOptions,
  BatchMessageHandler,
  CoordinatedMemberOptions,
  CoordinatedMemberSettings,
  MessageHandler,
} from './member/member-options';
export { MAX_MEMBER_NAME_LENGTH } from './member/member-options';
export { type BatchOptions, MAX_LANES } from './member/consumption-options';
export {
  AckRefusedError,
  type AckRefusalReason,
  type AckRefusedEvent,
  AckTimeoutError,
  BatchError,
  NackedError,
} from './member/consumption-errors';
export type {
  DeadLetterCause,
  DeadLetterEvent,
  DeadLetterNotice,
  DeadLetterOptions,
  ErrorClass,
} from './member/handle/dead-letter-options';
export { DEAD_LETTER_STACK_MAX_CHARS } from './member/handle/dead-letter-options';
export type { DeferredEvent, ParkedEvent, ReleasedEvent } from './member/shard-state';
export { HandlerAbortedError, type HandlerAbortReason, HandlerTimeoutError, ShardError } from './member/consumption-errors';
