/**
 * Attribute and metric names. Where OpenTelemetry's messaging semantic conventions name a thing, we
 * use their name (https://opentelemetry.io/docs/specs/semconv/messaging/); what they do not cover
 * is named under `rsc.` (metrics) or `messaging.redis_streams.` (attributes), as the conventions
 * ask of system-specific names. One list, so that docs/observability.md and the code agree.
 */
export const ATTR = {
  system: 'messaging.system',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destination: 'messaging.destination.name',
  partition: 'messaging.destination.partition.id',
  consumerGroup: 'messaging.consumer.group.name',
  clientId: 'messaging.client.id',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  messageKey: 'messaging.redis_streams.message.key',
  deliveryCount: 'messaging.redis_streams.message.delivery_count',
  /** Batch handler calls: the ids of the first and last entries handed, and the entry a BatchError named. */
  batchFirstMessageId: 'messaging.redis_streams.batch.first_message_id',
  batchLastMessageId: 'messaging.redis_streams.batch.last_message_id',
  batchFailedIndex: 'messaging.redis_streams.batch.failed_index',
  deadLetterCause: 'messaging.redis_streams.dead_letter.cause',
  errorType: 'error.type',
} as const;

/** `messaging.system` of every span and metric. */
export const MESSAGING_SYSTEM = 'redis_streams';

export const METRIC = {
  /** Histogram, seconds: one handler call (each retry is a call). */
  processDuration: 'messaging.process.duration',
  /** Counter: entries handed to a handler for the first time by this member. */
  consumedMessages: 'messaging.client.consumed.messages',
  /** Counter: entries written by producers. */
  sentMessages: 'messaging.client.sent.messages',
  /** Histogram, seconds: one producer send (or sendBatch). */
  operationDuration: 'messaging.client.operation.duration',
  /** Histogram, entries: the size of one batch handler call (`batch` member option). */
  batchSize: 'rsc.consumer.batch.size',
  acknowledged: 'rsc.consumer.acknowledged',
  retried: 'rsc.consumer.retried',
  deadLettered: 'rsc.consumer.dead_lettered',
  ackBatchesRefused: 'rsc.consumer.ack_batches.refused',
  lag: 'rsc.consumer.lag',
  pending: 'rsc.consumer.pending',
  /** Gauges per owned shard: what waits in its schedule (every group's delayed entries), the group's deferred retries and its entries parked behind them. */
  scheduled: 'rsc.consumer.scheduled',
  deferred: 'rsc.consumer.deferred',
  parked: 'rsc.consumer.parked',
  /** Gauge per owned shard, seconds: how late the earliest due entry of its schedules is (0 when none is due). */
  dueLag: 'rsc.consumer.due_lag',
  ownedShards: 'rsc.consumer.owned_shards',
  memberEpoch: 'rsc.consumer.member_epoch',
  rebalances: 'rsc.consumer.rebalances',
  rebalanceDuration: 'rsc.consumer.rebalance.duration',
  heartbeatDuration: 'rsc.coordinator.heartbeat.duration',
} as const;

/** Histogram buckets in seconds for calls that usually take micro- to milliseconds (handlers, heartbeats). */
export const FAST_BUCKETS_S = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Histogram buckets in entries for batch sizes (batch.maxSize is at most 10,000). */
export const BATCH_SIZE_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
/** Histogram buckets in seconds for rebalances (a heartbeat interval to a rebalance timeout). */
export const REBALANCE_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
