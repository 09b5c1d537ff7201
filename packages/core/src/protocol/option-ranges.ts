import { assertIntegerInRange } from './names';

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;
/** The most shards a stream may have (why: the `shardCount` row). */
const SHARD_COUNT_MAX = 8192;
/** The most masters of a test cluster (why: the `testing.cluster.masters` row). */
const CLUSTER_MASTERS_MAX = 9;
/** The largest time a Date holds (epoch ms): ECMAScript's time value range. */
const MAX_DATE_MS = 8_640_000_000_000_000;

/** The range of one numeric option: what its validation accepts, and where it is given. */
export interface OptionRange {
  /** The name a refusal gives it ("lanes must be an integer from 1 to 10000, got 0"). */
  readonly option: string;
  readonly min: number;
  readonly max: number;
  /** Every place it is given: an options object, a method, a decorator, a command line flag. */
  readonly appliesTo: readonly string[];
  /** Why the bounds are where they are, when it is more than "a day is long enough". */
  readonly why?: string;
}

/**
 * Every numeric option of the packages, with its range (SPEC 10.7: each is tested at its ends, or
 * its range shrinks to what works). The validation of each option reads its row here
 * (`checkOption`), and the edge tier (test/edge/) runs every row at its maximum: an option added
 * here is in the tier the day it is added (test/edge/option-ranges.test.ts fails for a row
 * without a case). A bound that depends on another option (`revocationTimeoutMs` at most
 * `rebalanceTimeoutMs`, a `shardIndex` below the stream's count) narrows the row at the call.
 */
export const OPTION_RANGES = {
  shardCount: {
    option: 'shardCount',
    min: 1,
    max: SHARD_COUNT_MAX,
    appliesTo: [
      'CoordinatorAdmin.createStream shardCount',
      'CoordinatorAdmin.resizeShards newCount',
      'CoordinatedMember shardCount',
      'StreamProducer shardCount',
      'dashboard resize',
      'rsc resize <n>',
    ],
    why:
      'a member joins by computing and committing the target of every shard, and claims, takes over, sweeps and reads each ' +
      'shard on its own: on a loaded 2-core machine a join at 16,384 shards outlasted its 5 s deadline (start() failed), and ' +
      "at 65,536; at 8,192 it took 3 s (docs/reliability.md, The edge tier). A member's shard lists go through Lua in chunks " +
      '(includes/callInChunks.lua)',
  },
  shardIndex: {
    option: 'shardIndex',
    min: 0,
    max: SHARD_COUNT_MAX - 1,
    appliesTo: [
      'StreamProducer message shardIndex (below the stream count)',
      'CoordinatorAdmin.resetOffsets and readDeadLetters shardIndex (below the stream span)',
      'rsc --shard',
    ],
    why: 'below the largest shardCount',
  },
  'member.runtimeMaxConcurrency': {
    option: 'runtimeMaxConcurrency',
    min: 1,
    max: 10_000,
    appliesTo: ['CoordinatedMember runtimeMaxConcurrency', 'CoordinatedMember.setRuntimeMaxConcurrency', 'CoordinatorConsumerProperties'],
  },
  'member.lanes': {
    option: 'lanes',
    min: 1,
    max: 10_000,
    appliesTo: ['CoordinatedMember lanes'],
    why: 'each lane is a handler call in flight',
  },
  'member.weight': { option: 'weight', min: 1, max: 1_000_000, appliesTo: ['CoordinatedMember weight'] },
  'member.sessionTimeoutMs': {
    option: 'sessionTimeoutMs',
    min: 100,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember sessionTimeoutMs'],
    why: 'the coordinator takes at most a day (heartbeat-14.lua)',
  },
  'member.rebalanceTimeoutMs': {
    option: 'rebalanceTimeoutMs',
    min: 100,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember rebalanceTimeoutMs'],
    why: 'the coordinator takes at most a day (heartbeat-14.lua)',
  },
  'member.revocationTimeoutMs': {
    option: 'revocationTimeoutMs',
    min: 0,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember revocationTimeoutMs (at most rebalanceTimeoutMs)'],
  },
  'member.shutdownTimeoutMs': { option: 'shutdownTimeoutMs', min: 0, max: DAY_MS, appliesTo: ['CoordinatedMember shutdownTimeoutMs'] },
  'member.maxAttempts': { option: 'maxAttempts', min: 1, max: 1000, appliesTo: ['CoordinatedMember maxAttempts'] },
  'member.handlerTimeoutMs': { option: 'handlerTimeoutMs', min: 0, max: DAY_MS, appliesTo: ['CoordinatedMember handlerTimeoutMs'] },
  'member.handlerStallMs': {
    option: 'handlerStallMs',
    min: 1000,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember handlerStallMs'],
    why:
      'under a second, ordinary calls would be reported as hung (an error, a problems line, health down) and give their workers back, ' +
      'and runtimeMaxConcurrency would stop meaning the calls running; a default from a shorter sessionTimeoutMs is raised to it',
  },
  'member.retryBackoffMs': { option: 'retryBackoffMs', min: 0, max: DAY_MS, appliesTo: ['CoordinatedMember retryBackoffMs'] },
  'member.retryBackoffMaxMs': {
    option: 'retryBackoffMaxMs',
    min: 0,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember retryBackoffMaxMs (at least retryBackoffMs)'],
  },
  'member.batchSize': {
    option: 'batchSize',
    min: 1,
    max: 10_000,
    appliesTo: ['CoordinatedMember batchSize'],
    why: 'the entries one read takes from a shard; a batch of ids goes through Lua in chunks (includes/callInChunks.lua)',
  },
  'member.maxBufferedEntries': {
    option: 'maxBufferedEntries',
    min: 1,
    max: 100_000,
    appliesTo: ['CoordinatedMember maxBufferedEntries'],
    why:
      'one read brings up to batchSize entries from each of up to maxBufferedEntries / batchSize shards: at 1,000,000 (100 shards ' +
      'of 10,000) no read came back within its deadline and the member handled nothing (docs/reliability.md, The edge tier)',
  },
  'member.maxBufferedEntriesPerClient': {
    option: 'maxBufferedEntriesPerClient',
    min: 1,
    max: 100_000,
    appliesTo: ['CoordinatedMember maxBufferedEntriesPerClient (at least batch.maxSize)'],
    why: 'what every member of one client buffers together: no more than one member may (maxBufferedEntries)',
  },
  'member.blockMs': { option: 'blockMs', min: 1, max: 60_000, appliesTo: ['CoordinatedMember blockMs'] },
  'member.sweepIntervalMs': { option: 'sweepIntervalMs', min: 1, max: DAY_MS, appliesTo: ['CoordinatedMember sweepIntervalMs'] },
  'member.cutoverCheckIntervalMs': {
    option: 'cutoverCheckIntervalMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatedMember cutoverCheckIntervalMs'],
  },
  'member.ackTimeoutMs': { option: 'ackTimeoutMs', min: 1, max: DAY_MS, appliesTo: ["CoordinatedMember ackTimeoutMs (ackMode 'manual')"] },
  'member.nack.retryAfterMs': {
    option: 'retryAfterMs',
    min: 0,
    max: DAY_MS,
    appliesTo: ["StreamMessage nack({ retryAfterMs }) (ackMode 'manual')"],
    why: 'a retry waits it out in place of the backoff; the backoff is at most a day too',
  },
  'member.batch.maxSize': {
    option: 'batch.maxSize',
    min: 1,
    max: 10_000,
    appliesTo: ['CoordinatedMember batch.maxSize (at most batchSize and maxBufferedEntries)'],
    why: 'never more than batchSize, the entries one read takes',
  },
  'member.batch.maxWaitMs': { option: 'batch.maxWaitMs', min: 0, max: DAY_MS, appliesTo: ['CoordinatedMember batch.maxWaitMs'] },
  'member.deadLetter.maxLen': {
    option: 'deadLetter.maxLen',
    min: 1,
    max: 1_000_000_000,
    appliesTo: ['CoordinatedMember deadLetter.maxLen'],
  },
  'replicaWait.replicas': {
    option: 'replicas',
    min: 1,
    max: 1000,
    appliesTo: ['CoordinatedMember ackWaitForReplicas.replicas', 'StreamProducer waitForReplicas.replicas'],
  },
  'replicaWait.timeoutMs': {
    option: 'timeoutMs',
    min: 1,
    max: HOUR_MS,
    appliesTo: ['CoordinatedMember ackWaitForReplicas.timeoutMs', 'StreamProducer waitForReplicas.timeoutMs'],
    why: 'WAIT 0 would wait for ever: a call must end',
  },
  'coordinator.heartbeatIntervalMs': {
    option: 'heartbeatIntervalMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorOptions heartbeatIntervalMs (every member, admin and client of a group)'],
  },
  'coordinator.fastHeartbeatIntervalMs': {
    option: 'fastHeartbeatIntervalMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorOptions fastHeartbeatIntervalMs'],
  },
  'coordinator.assignmentTimeoutMs': {
    option: 'assignmentTimeoutMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorOptions assignmentTimeoutMs'],
  },
  'coordinator.assignmentDelayMs': {
    option: 'assignmentDelayMs',
    min: 0,
    max: DAY_MS,
    appliesTo: ['CoordinatorOptions assignmentDelayMs'],
  },
  'coordinator.retentionMs': { option: 'retentionMs', min: 0, max: 365 * DAY_MS, appliesTo: ['CoordinatorOptions retentionMs'] },
  'coordinator.retentionMaxCount': {
    option: 'retentionMaxCount',
    min: 0,
    max: 1_000_000,
    appliesTo: ['CoordinatorOptions retentionMaxCount'],
  },
  'coordinator.eventLogMaxLen': { option: 'eventLogMaxLen', min: 1, max: 10_000_000, appliesTo: ['CoordinatorOptions eventLogMaxLen'] },
  'producer.maxLenApprox': {
    option: 'maxLenApprox',
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    appliesTo: ['StreamProducer maxLenApprox'],
  },
  'producer.metadataRefreshMs': {
    option: 'metadataRefreshMs',
    min: 1,
    max: HOUR_MS,
    appliesTo: ['StreamProducer metadataRefreshMs'],
  },
  'producer.send.delayMs': {
    option: 'delayMs',
    min: 0,
    max: 365 * DAY_MS,
    appliesTo: [
      'StreamProducer send and sendBatch message delayMs',
      'StreamPublisher publish delayMs',
      'CoordinatorClientProxy emit delayMs (the message option)',
    ],
    why: "a delayed entry waits in its shard's schedule (docs/runtime.md, Delayed delivery): a year covers reminders and retries; the schedule is not a store of record for longer",
  },
  'producer.send.deliverAt': {
    option: 'deliverAt',
    min: 0,
    max: MAX_DATE_MS,
    appliesTo: [
      "StreamProducer send and sendBatch message deliverAt (a Date or epoch ms; at most delayMs' maximum ahead of the sender's clock)",
      'StreamPublisher publish deliverAt',
      'CoordinatorClientProxy emit deliverAt (the message option)',
    ],
    why: "epoch ms, the largest a Date holds; a time more than 365 days ahead of the sender's clock (delayMs' maximum) is refused at the call",
  },
  'producer.appendTimeoutMs': { option: 'appendTimeoutMs', min: 1, max: HOUR_MS, appliesTo: ['StreamProducer appendTimeoutMs'] },
  'admin.resizeShards.graceMs': {
    option: 'graceMs',
    min: 0,
    max: HOUR_MS,
    appliesTo: ['CoordinatorAdmin.resizeShards graceMs', 'rsc resize --grace-ms'],
  },
  'admin.resizeShards.switchDelayMs': {
    option: 'switchDelayMs',
    min: 0,
    max: HOUR_MS,
    appliesTo: ['CoordinatorAdmin.resizeShards switchDelayMs'],
  },
  'admin.readSchedule.count': {
    option: 'count',
    min: 1,
    max: 1000,
    appliesTo: ['CoordinatorAdmin.readSchedule count', 'rsc schedule list --count'],
    why: 'one page is one read-only script run (readSchedule-2.lua, MAX_PAGE): Redis does nothing else meanwhile; page on with `next`',
  },
  'admin.readDeadLetters.count': {
    option: 'count',
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    appliesTo: ['CoordinatorAdmin.readDeadLetters count', 'rsc dead-letters list --count'],
  },
  'admin.replay.takeOverAfterMs': {
    option: 'takeOverAfterMs',
    min: 0,
    max: DAY_MS,
    appliesTo: ['CoordinatorAdmin.replayDeadLetter(s) takeOverAfterMs', 'rsc dead-letters replay --take-over-after-ms'],
  },
  'admin.trim.maxLen': {
    option: 'maxLen',
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    appliesTo: ['CoordinatorAdmin.trim maxLen', 'CoordinatorAdmin.startTrimming maxLen', 'rsc trim --max-len'],
  },
  'admin.readGroupEvents.count': {
    option: 'count',
    min: 1,
    max: 100_000,
    appliesTo: ['CoordinatorAdmin.readGroupEvents count', 'rsc events --count'],
  },
  'admin.readGroupEvents.blockMs': {
    option: 'blockMs',
    min: 0,
    max: HOUR_MS,
    appliesTo: ['CoordinatorAdmin.readGroupEvents blockMs'],
  },
  'admin.startTrimming.intervalMs': {
    option: 'intervalMs',
    min: 100,
    max: DAY_MS,
    appliesTo: ['CoordinatorAdmin.startTrimming intervalMs'],
  },
  'admin.startTrimming.runTimeoutMs': {
    option: 'runTimeoutMs',
    min: 100,
    max: DAY_MS,
    appliesTo: ['CoordinatorAdmin.startTrimming runTimeoutMs'],
  },
  'nestjs.concurrency': {
    option: 'concurrency',
    min: 1,
    max: 1024,
    appliesTo: ['@StreamListener concurrency', 'StreamListenerRegistry', 'RedisStreamsServer concurrency'],
    why: 'members of one listener, each a member of its group on the one client',
  },
  'nestjs.client.timeoutMs': {
    option: 'timeoutMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorClientProxy timeoutMs'],
    why: 'a timer of more than 2^31 - 1 ms fires at once',
  },
  'nestjs.client.inboxTtlMs': {
    option: 'inboxTtlMs',
    min: 300,
    max: DAY_MS,
    appliesTo: ['CoordinatorClientProxy inboxTtlMs'],
    why: 'the inbox is refreshed every third of it; a timer of more than 2^31 - 1 ms fires at once',
  },
  'nestjs.startRetryDelayMs': {
    option: 'startRetryDelayMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorModule startRetryDelayMs', 'RedisStreamsServer startRetryDelayMs'],
    why: 'a timer of more than 2^31 - 1 ms fires at once',
  },
  'nestjs.healthCheckTimeoutMs': {
    option: 'healthCheckTimeoutMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorModule healthCheckTimeoutMs'],
    why: 'a timer of more than 2^31 - 1 ms fires at once',
  },
  'nestjs.testing.timeoutMs': {
    option: 'timeoutMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['CoordinatorTesting ready, drained, handled, deadLettered timeoutMs'],
    why: 'a timer of more than 2^31 - 1 ms fires at once',
  },
  'nestjs.testing.failNext.count': {
    option: 'count',
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    appliesTo: ['CoordinatorTesting.failNext count'],
    why: 'attempts to fail, counted down one by one',
  },
  'testing.cluster.masters': {
    option: 'masters',
    min: 3,
    max: CLUSTER_MASTERS_MAX,
    appliesTo: ['RedisCluster.start masters (/testing)'],
    why:
      'Redis Cluster needs 3; every node is a redis-server on the test machine, and the edge tier starts the largest cluster ' +
      '(masters and replicas at their maxima: 27 processes) on a 2-core machine',
  },
  'testing.cluster.replicasPerMaster': {
    option: 'replicasPerMaster',
    min: 0,
    max: 2,
    appliesTo: ['RedisCluster.start replicasPerMaster (/testing)'],
    why: 'as masters: the largest cluster is started by the edge tier',
  },
  'testing.cluster.nodeTimeoutMs': {
    option: 'nodeTimeoutMs',
    min: 1,
    max: DAY_MS,
    appliesTo: ['RedisCluster.start nodeTimeoutMs (/testing: cluster-node-timeout)'],
  },
  'dashboard.refreshMs': { option: 'refreshMs', min: 500, max: 60_000, appliesTo: ['dashboard refreshMs'] },
  'rsc.resize.timeout': {
    option: 'timeout',
    min: 1,
    max: 86_400,
    appliesTo: ['rsc resize --timeout (seconds)'],
  },
} as const satisfies Record<string, OptionRange>;

export type OptionRangeName = keyof typeof OPTION_RANGES;

/**
 * `value` as the option `name` takes it, or a RangeError naming the option (`label`, default the
 * row's name) and the value. `within` narrows the row's range by another option or the stream
 * (`revocationTimeoutMs` at most `rebalanceTimeoutMs`); it never widens it.
 */
export function checkOption(name: OptionRangeName, value: unknown, within: { label?: string; min?: number; max?: number } = {}): number {
  const range: OptionRange = OPTION_RANGES[name];
  return assertIntegerInRange(
    within.label ?? range.option,
    value,
    Math.max(range.min, within.min ?? range.min),
    Math.min(range.max, within.max ?? range.max),
  );
}
