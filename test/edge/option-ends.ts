import {
  CoordinatedMember,
  type CoordinatedMemberOptions,
  CoordinatorAdmin,
  type OptionRangeName,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { CoordinatorClientProxy } from '@redis-stream-coordinator/nestjs/microservices';
import type { Redis } from 'ioredis';
import { resolvePeriodicTrimOptions } from '../../packages/core/src/admin/periodic-trim';
import { ManualSettlement } from '../../packages/core/src/member/handle/manual-ack';
import { resolveClusterOptions } from '../../packages/core/src/testing/redis-cluster';
import { CoordinatorConnection } from '../../packages/nestjs/src/coordinator-connection';
import { checkTimeout } from '../../packages/nestjs/src/testing/deadline';
import { checkFailNextCount } from '../../packages/nestjs/src/testing/injected-failures';
import { integer } from '../../packages/cli/src/args';
import { resolveDashboardOptions } from '../../packages/dashboard/src/dashboard-options';
import { resolvePatternOptions } from '../../packages/nestjs/src/microservices/redis-streams-server.options';

/**
 * For every row of OPTION_RANGES, how a value reaches that option's validation: the ends test
 * (test/edge/option-ranges.test.ts) passes each end and one past it. `client` is a client of a
 * real server (an accepted value may go on to a Redis call; only a refusal of the row's range
 * counts). The Record type makes a row added to OPTION_RANGES a compile error here until it has one.
 */
export function optionEnds(client: Redis): Record<OptionRangeName, (value: number) => unknown> {
  const member = (options: Partial<CoordinatedMemberOptions<unknown>>) =>
    new CoordinatedMember(client, { streamPrefix: 'ends', consumerGroup: 'g', handler: () => undefined, ...options } as never);
  const admin = new CoordinatorAdmin(client);
  const producer = (options: object) => new StreamProducer(client, { streamPrefix: 'ends', ...options });
  const proxy = (options: object) => new CoordinatorClientProxy({ redis: { client }, ...options });
  // The module's connection on the given client (never closed by it); a manual attempt's settlement, nacked.
  const connection = (options: object) => CoordinatorConnection.fromOptions({ redis: { client }, ...options }, () => undefined);
  const manualMessage = () => new ManualSettlement('1-0', 0, new AbortController().signal, () => new Error('refused') as never);
  return {
    shardCount: (v) => producer({ shardCount: v }),
    shardIndex: (v) => producer({}).send({ payload: {}, shardIndex: v }),
    'member.runtimeMaxConcurrency': (v) => member({ runtimeMaxConcurrency: v }),
    'member.lanes': (v) => member({ lanes: v, runtimeMaxConcurrency: 1 }),
    'member.weight': (v) => member({ weight: v }),
    'member.sessionTimeoutMs': (v) => member({ sessionTimeoutMs: v }),
    'member.rebalanceTimeoutMs': (v) => member({ rebalanceTimeoutMs: v, revocationTimeoutMs: 0 }),
    'member.revocationTimeoutMs': (v) => member({ revocationTimeoutMs: v, rebalanceTimeoutMs: 86_400_000 }),
    'member.shutdownTimeoutMs': (v) => member({ shutdownTimeoutMs: v }),
    'member.maxAttempts': (v) => member({ maxAttempts: v }),
    'member.handlerTimeoutMs': (v) => member({ handlerTimeoutMs: v }),
    'member.handlerStallMs': (v) => member({ handlerStallMs: v }),
    'member.retryBackoffMs': (v) => member({ retryBackoffMs: v, retryBackoffMaxMs: 86_400_000 }),
    'member.retryBackoffMaxMs': (v) => member({ retryBackoffMaxMs: v, retryBackoffMs: 0 }),
    'member.batchSize': (v) => member({ batchSize: v }),
    'member.maxBufferedEntries': (v) => member({ maxBufferedEntries: v }),
    'member.maxBufferedEntriesPerClient': (v) => member({ maxBufferedEntriesPerClient: v }),
    'member.blockMs': (v) => member({ blockMs: v }),
    'member.sweepIntervalMs': (v) => member({ sweepIntervalMs: v }),
    'member.cutoverCheckIntervalMs': (v) => member({ cutoverCheckIntervalMs: v }),
    'member.ackTimeoutMs': (v) => member({ ackMode: 'manual', ackTimeoutMs: v }),
    'member.nack.retryAfterMs': (v) => manualMessage().nack({ retryAfterMs: v }),
    'member.batch.maxSize': (v) => member({ batch: { maxSize: v }, batchSize: 10_000, maxBufferedEntries: 10_000 } as never),
    'member.batch.maxWaitMs': (v) => member({ batch: { maxSize: 1, maxWaitMs: v } } as never),
    'member.deadLetter.maxLen': (v) => member({ deadLetter: { maxLen: v } }),
    'replicaWait.replicas': (v) => member({ ackWaitForReplicas: { replicas: v, timeoutMs: 1 } }),
    'replicaWait.timeoutMs': (v) => producer({ waitForReplicas: { replicas: 1, timeoutMs: v } }),
    'coordinator.heartbeatIntervalMs': (v) => new CoordinatorAdmin(client, { heartbeatIntervalMs: v }),
    'coordinator.fastHeartbeatIntervalMs': (v) => new CoordinatorAdmin(client, { fastHeartbeatIntervalMs: v }),
    'coordinator.assignmentTimeoutMs': (v) => new CoordinatorAdmin(client, { assignmentTimeoutMs: v }),
    'coordinator.assignmentDelayMs': (v) => new CoordinatorAdmin(client, { assignmentDelayMs: v }),
    'coordinator.retentionMs': (v) => new CoordinatorAdmin(client, { retentionMs: v }),
    'coordinator.retentionMaxCount': (v) => new CoordinatorAdmin(client, { retentionMaxCount: v }),
    'coordinator.eventLogMaxLen': (v) => new CoordinatorAdmin(client, { eventLogMaxLen: v }),
    'producer.maxLenApprox': (v) => producer({ maxLenApprox: v }),
    'producer.metadataRefreshMs': (v) => producer({ metadataRefreshMs: v }),
    'producer.appendTimeoutMs': (v) => producer({ appendTimeoutMs: v }),
    'producer.send.delayMs': (v) => producer({}).send({ payload: {}, delayMs: v }),
    'producer.send.deliverAt': (v) => producer({}).send({ payload: {}, deliverAt: v }),
    'admin.resizeShards.graceMs': (v) => admin.resizeShards('no-such-stream', 2, { graceMs: v }),
    'admin.resizeShards.switchDelayMs': (v) => admin.resizeShards('no-such-stream', 2, { switchDelayMs: v }),
    'admin.readDeadLetters.count': (v) => admin.readDeadLetters('no-such-stream', 'g', { count: v }),
    'admin.readSchedule.count': (v) => admin.readSchedule({ streamPrefix: 'no-such-stream', shardIndex: 0 }, { count: v }),
    'admin.replay.takeOverAfterMs': (v) => admin.replayDeadLetters('no-such-stream', 'g', {}, { takeOverAfterMs: v }),
    'admin.trim.maxLen': (v) => admin.trim('no-such-stream', { maxLen: v }),
    'admin.readGroupEvents.count': (v) => admin.readGroupEvents('no-such-stream', 'g', { count: v }),
    'admin.readGroupEvents.blockMs': (v) => admin.readGroupEvents('no-such-stream', 'g', { blockMs: v }),
    'admin.startTrimming.intervalMs': (v) => resolvePeriodicTrimOptions({ intervalMs: v }),
    'admin.startTrimming.runTimeoutMs': (v) => resolvePeriodicTrimOptions({ intervalMs: 100, runTimeoutMs: v }),
    'nestjs.concurrency': (v) => resolvePatternOptions('ends', { concurrency: v }, { consumerGroup: 'g' } as never),
    'nestjs.client.timeoutMs': (v) => proxy({ timeoutMs: v }),
    'nestjs.client.inboxTtlMs': (v) => proxy({ inboxTtlMs: v }),
    'nestjs.startRetryDelayMs': (v) => connection({ startRetryDelayMs: v }),
    'nestjs.healthCheckTimeoutMs': (v) => connection({ healthCheckTimeoutMs: v }),
    'nestjs.testing.timeoutMs': (v) => checkTimeout(v, 'ends'),
    'nestjs.testing.failNext.count': (v) => checkFailNextCount(v),
    'testing.cluster.masters': (v) => resolveClusterOptions({ masters: v }),
    'testing.cluster.replicasPerMaster': (v) => resolveClusterOptions({ replicasPerMaster: v }),
    'testing.cluster.nodeTimeoutMs': (v) => resolveClusterOptions({ nodeTimeoutMs: v }),
    'dashboard.refreshMs': (v) => resolveDashboardOptions({ redis: client, refreshMs: v }),
    'rsc.resize.timeout': (v) => integer('rsc.resize.timeout')(String(v)),
  };
}
