import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatedMember, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { setOtelApiForTests } from '../../packages/core/src/telemetry/otel-api';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// No OpenTelemetry provider is registered in this file (each test file runs in its own process).
const redis = useRedisServer();
const started: CoordinatedMember[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
  setOtelApiForTests(undefined);
});

async function handledHeaders(streamPrefix: string): Promise<{ member: CoordinatedMember; headers: Record<string, string> }> {
  const seen: Record<string, string>[] = [];
  const member = new CoordinatedMember(redis.client(), {
    streamPrefix,
    consumerGroup: 'group',
    shardCount: 1,
    coordinator: { heartbeatIntervalMs: 200 },
    handler: (message) => void seen.push(message.headers),
  });
  member.on('error', () => undefined);
  started.push(member);
  await member.start();
  await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: 1, headers: { a: 'b' } });
  await pollUntil('handled', async () => seen.length === 1);
  return { member, headers: seen[0] };
}

const aMessage = {
  id: '1-0',
  streamPrefix: 'x',
  shardIndex: 0,
  key: undefined,
  payload: 1,
  headers: {},
  deliveryCount: 1,
  signal: new AbortController().signal,
  ack: async () => undefined,
  nack: async () => undefined,
} satisfies StreamMessage;

describe('telemetry without a provider', () => {
  it('the API installed but no provider registered: no trace header, and no probe (nothing allocated) per handler call', async () => {
    const { member, headers } = await handledHeaders(uniqueName('otel-noprovider'));
    expect(headers).toEqual({ a: 'b' });
    expect(member.options.telemetry).toBeDefined();
    expect(member.options.telemetry!.startHandler(aMessage, 1)).toBeUndefined();
  });

  it('the API not installed: members and producers work without it', async () => {
    setOtelApiForTests(null);
    const { member, headers } = await handledHeaders(uniqueName('otel-noapi'));
    expect(headers).toEqual({ a: 'b' });
    expect(member.options.telemetry!.startHandler(aMessage, 1)).toBeUndefined();
  });
});
