import 'reflect-metadata';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import type { StreamMessage } from '@redis-stream-coordinator/core';
import { CoordinatorModule, CoordinatorRegistry, StreamListener, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// What the module logs when it matters (docs/nestjs.md, Logs): each rebalance of each member
// (shards assigned and given up), each dead letter, fence and lost lease, through Nest's Logger.
const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();

/** The module's lines, by level, as Nest's Logger passes them on. */
function aLogger() {
  const lines: { level: 'log' | 'warn'; line: string }[] = [];
  const keep = (level: 'log' | 'warn') => (message: unknown, context?: unknown) => {
    if (context === 'CoordinatorModule') lines.push({ level, line: String(message) });
  };
  const logger: LoggerService = { log: keep('log'), warn: keep('warn'), error() {}, debug() {}, verbose() {} };
  return { lines, logger };
}

async function anApp(streamPrefix: string, logger: LoggerService, options: { logMemberEvents?: boolean } = {}) {
  @Injectable()
  class Summaries {
    @StreamListener({ streamPrefix, consumerGroup: 'summary-group', shardCount: 4, maxAttempts: 1 })
    async onSummary(message: StreamMessage<string>) {
      if (message.payload === 'poison') throw new Error('cannot summarize poison');
    }
  }
  @Module({ providers: [Summaries] })
  class SummaryModule {}
  const app = await Test.createTestingModule({
    imports: [
      CoordinatorModule.forRoot({ redis: { url: redis.server.url }, coordinator: { heartbeatIntervalMs: 200 }, ...options }),
      SummaryModule,
    ],
  })
    .setLogger(logger)
    .compile();
  apps.push(app);
  await app.init();
  return app;
}

const memberOf = (app: TestingModule) => app.get(CoordinatorRegistry).members()[0];
const matching = (lines: { line: string }[], pattern: RegExp) => lines.filter(({ line }) => pattern.test(line));

describe("the module logs its members' rebalances, dead letters and fences", () => {
  it('one line per event: shards assigned and given up (log), a dead letter and a fence (warn)', async () => {
    const streamPrefix = uniqueName('logged');
    const { lines, logger } = aLogger();
    const first = await anApp(streamPrefix, logger);
    const a = memberOf(first).memberId;
    await pollUntil(
      'a assigned every shard',
      async () => matching(lines, new RegExp(`member ${a} .* was assigned shards 0-3 of ${streamPrefix}/summary-group`)).length > 0,
    );

    const second = await anApp(streamPrefix, logger);
    const b = memberOf(second).memberId;
    await pollUntil('the rebalance logged', async () => matching(lines, new RegExp(`member ${b} .* was assigned shards`)).length > 0);
    const gaveUp = matching(
      lines,
      new RegExp(
        `member ${a} \\(@StreamListener on Summaries.onSummary\\) gave up shards 2-3 of ${streamPrefix}/summary-group \\(memberEpoch \\d+\\)`,
      ),
    );
    expect(gaveUp).toEqual([{ level: 'log', line: expect.any(String) }]);

    const sent = await first.get(StreamPublisher).publish(streamPrefix, { key: 'k', payload: 'poison' });
    const deadLetter = new RegExp(
      `dead-lettered entry ${sent.id} of shard ${sent.shardIndex} of ${streamPrefix}/summary-group \\(attempts-exhausted after 1 attempt\\(s\\)\\): .*cannot summarize poison`,
    );
    await pollUntil('the dead letter logged', async () => matching(lines, deadLetter).length > 0);

    // A rejoin of a's instance whose answer a never got: a's epoch is stale, and a is fenced.
    const member = memberOf(first);
    await member.coordinator.heartbeat({
      streamPrefix,
      consumerGroup: 'summary-group',
      memberId: member.memberId,
      memberEpoch: 0,
      instanceId: member.instanceId,
    });
    const fenced = new RegExp(`member ${a} .* was fenced \\(FENCED_MEMBER_EPOCH\\)`);
    await pollUntil('the fence logged', async () => matching(lines, fenced).length > 0);

    expect(matching(lines, deadLetter)).toEqual([{ level: 'warn', line: expect.any(String) }]);
    expect(matching(lines, fenced)).toEqual([{ level: 'warn', line: expect.any(String) }]);
  });

  it('logMemberEvents: false logs none of them', async () => {
    const streamPrefix = uniqueName('quiet');
    const { lines, logger } = aLogger();
    const app = await anApp(streamPrefix, logger, { logMemberEvents: false });
    await pollUntil('the member owns every shard', async () => memberOf(app).ownedShards().length === 4);
    let deadLettered = 0;
    memberOf(app).on('dead-letter', () => deadLettered++);
    await app.get(StreamPublisher).publish(streamPrefix, { key: 'k', payload: 'poison' });
    await pollUntil('the entry dead-lettered', async () => deadLettered === 1);
    expect(matching(lines, /was assigned|gave up|dead-lettered|was fenced|lost its lease/)).toEqual([]);
  });

  it('a logMemberEvents that is not a boolean fails the startup naming it', async () => {
    const { logger } = aLogger();
    await expect(anApp(uniqueName('bad'), logger, { logMemberEvents: 'no' as never })).rejects.toThrow(
      'CoordinatorModule: logMemberEvents must be a boolean, got "no"',
    );
  });
});
