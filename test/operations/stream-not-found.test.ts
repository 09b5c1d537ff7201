import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  ErrorCode,
  GroupNotFoundError,
  StreamNotFoundError,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { CoordinatorModule, StreamListener, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// A stream prefix without metadata is a missing stream, not a missing group: every call that finds
// it so throws (or emits) StreamNotFoundError, whose message names the stream and how to create it.
// It is a GroupNotFoundError (code GROUP_NOT_FOUND), so code written against that class still
// catches it (docs/protocol.md, Errors; docs/operations.md, Errors).
const redis = useRedisServer();
const admin = () => new CoordinatorAdmin(redis.client());

/** The rejection of `call`, which must reject. */
async function refusal(call: () => Promise<unknown>): Promise<Error> {
  try {
    await call();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

/** A StreamNotFoundError that still is a GroupNotFoundError, naming the stream and how to create it. */
function expectStreamNotFound(error: Error, streamPrefix: string): void {
  expect(error.name).toBe('StreamNotFoundError');
  expect(error).toBeInstanceOf(StreamNotFoundError);
  expect(error).toBeInstanceOf(GroupNotFoundError);
  expect((error as StreamNotFoundError).code).toBe(ErrorCode.GROUP_NOT_FOUND);
  expect((error as StreamNotFoundError).streamPrefix).toBe(streamPrefix);
  expect(error.message).toContain(`stream "${streamPrefix}" does not exist`);
  expect(error.message).toContain('CoordinatorAdmin.createStream');
}

describe('a stream without metadata is reported as a missing stream (StreamNotFoundError)', () => {
  it('every admin call on it throws StreamNotFoundError naming the stream and how to create it', async () => {
    const streamPrefix = uniqueName('missing');
    const calls: [string, () => Promise<unknown>][] = [
      ['trim', () => admin().trim(streamPrefix)],
      ['resizeShards', () => admin().resizeShards(streamPrefix, 4)],
      ['deleteDrainedShards', () => admin().deleteDrainedShards(streamPrefix)],
      ['shardPositions', () => admin().shardPositions(streamPrefix, 'group')],
      ['resetOffsets', () => admin().resetOffsets(streamPrefix, 'group', { to: 'earliest' })],
      ['describeGroup', () => admin().describeGroup(streamPrefix, 'group')],
    ];
    for (const [name, call] of calls) {
      const error = await refusal(call);
      expect(error.name, name).toBe('StreamNotFoundError');
      expectStreamNotFound(error, streamPrefix);
    }
  });

  it('describeGroup tells a group nobody joined (GroupNotFoundError) from a stream that does not exist', async () => {
    const streamPrefix = uniqueName('exists');
    await admin().createStream({ streamPrefix, shardCount: 2 });
    const error = await refusal(() => admin().describeGroup(streamPrefix, 'nobody'));
    expect(error).toBeInstanceOf(GroupNotFoundError);
    expect(error).not.toBeInstanceOf(StreamNotFoundError);
    expect(error.message).toContain(`group "nobody" of stream "${streamPrefix}" does not exist`);
  });

  it('a producer without shardCount refuses a send with StreamNotFoundError, nothing written', async () => {
    const streamPrefix = uniqueName('unsent');
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const error = await refusal(() => producer.send({ key: 'a', payload: 1 }));
    expectStreamNotFound(error, streamPrefix);
    expect(error.message).toContain('give the StreamProducer shardCount');
    expect(await admin().listStreams()).not.toContain(streamPrefix);
  });

  it('a member without shardCount emits one StreamNotFoundError, says the same in stats().problems, and joins once the stream is created', async () => {
    const streamPrefix = uniqueName('late');
    const member = new CoordinatedMember(redis.client(), {
      streamPrefix,
      consumerGroup: 'group',
      memberId: 'a',
      coordinator: { heartbeatIntervalMs: 200 },
      handler: () => undefined,
    });
    const errors: Error[] = [];
    member.on('error', (error) => errors.push(error));
    const started = member.start();
    try {
      await pollUntil('the missing stream reported', async () => errors.length > 0);
      expectStreamNotFound(errors[0], streamPrefix);
      expect(errors[0].message).toContain('member a');
      // The problems line health reports says the same, once.
      const problems = member.stats().problems;
      expect(problems).toHaveLength(1);
      expect(problems[0]).toContain(
        `stream "${streamPrefix}" does not exist (it has no metadata): create it with CoordinatorAdmin.createStream, or give the member shardCount`,
      );
      await admin().createStream({ streamPrefix, shardCount: 2 });
      await started;
      await pollUntil('a to own both shards', async () => member.ownedShards().length === 2);
      expect(errors).toHaveLength(1);
    } finally {
      await member.stop();
    }
  });
});

describe('a missing stream is told in the options of whoever hit it', () => {
  it('an admin call names createStream, never an option of a producer or member it does not have', async () => {
    const error = await refusal(() => admin().trim(uniqueName('untrimmed')));
    expect(error.message).toMatch(/: create it with CoordinatorAdmin\.createStream \(listStreams\(\) lists the streams that exist\)$/);
    expect(error.message).not.toMatch(/producer|member/);
  });

  it('StreamPublisher.publish and publishBatch name what a Nest application can do, not the StreamProducer shardCount a publish call has no option for', async () => {
    const streamPrefix = uniqueName('unpublished');
    const app = await Test.createTestingModule({ imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url } })] }).compile();
    try {
      const publisher = app.get(StreamPublisher);
      for (const [call, send] of [
        ['StreamPublisher.publish', () => publisher.publish(streamPrefix, { key: 'a', payload: 1 })],
        ['StreamPublisher.publishBatch', () => publisher.publishBatch(streamPrefix, [{ key: 'a', payload: 1 }])],
      ] as const) {
        const error = await refusal(send);
        expectStreamNotFound(error, streamPrefix);
        expect(error.message).toMatch(new RegExp(`^${call.replace('.', '\\.')}, nothing written: stream "${streamPrefix}" does not exist`));
        expect(error.message).toContain('or give a @StreamListener of the stream');
        expect(error.message).not.toContain('StreamProducer');
      }
      expect(await admin().listStreams()).not.toContain(streamPrefix);
    } finally {
      await app.close();
    }
  });

  it("a Nest listener's member logs it naming the listener's own shardCount", async () => {
    const streamPrefix = uniqueName('unlistened');
    const warnings: string[] = [];
    const logger = { log() {}, error() {}, debug() {}, verbose() {}, warn: (message: unknown) => void warnings.push(String(message)) };
    @Injectable()
    class Orders {
      @StreamListener({ streamPrefix, consumerGroup: 'billing' })
      async onOrder() {}
    }
    @Module({ providers: [Orders] })
    class OrdersModule {}
    const app = await Test.createTestingModule({
      imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url }, coordinator: { heartbeatIntervalMs: 200 } }), OrdersModule],
    })
      .setLogger(logger)
      .compile();
    try {
      await app.init();
      const line = await pollUntil('the missing stream logged', async () =>
        warnings.find((w) => w.includes(`stream "${streamPrefix}" does not exist`)),
      );
      expect(line).toContain("give @StreamListener on Orders.onOrder shardCount (or the module's defaults.shardCount)");
      expect(line).not.toContain('give the member shardCount');
    } finally {
      await app.close();
    }
  });
});
