import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CoordinatorAdmin,
  KeyBuilder,
  type PayloadCodec,
  type StreamMessage,
  StreamProducer,
  jsonCodec,
  msgpackCodec,
} from '@redis-stream-coordinator/core';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Codecs and schemas (docs/runtime.md, Codecs and schemas): binary payloads end to end, the codec named in each entry,
// and Standard Schema validation that dead-letters what does not match.
const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 100 } });
const keys = new KeyBuilder();

async function aStream(shardCount = 1) {
  const streamPrefix = uniqueName('codec');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

/** Waits for the group's first dead letter. */
async function firstDeadLetter(streamPrefix: string) {
  const [letter] = await pollUntil('a dead letter', async () => {
    const letters = await new CoordinatorAdmin(redis.client()).readDeadLetters(streamPrefix, 'group');
    return letters.length > 0 && letters;
  });
  return letter;
}

function collector() {
  const seen: StreamMessage<unknown>[] = [];
  return { seen, handler: (message: StreamMessage<unknown>) => void seen.push(message) };
}

describe('codecs', () => {
  it('a msgpack payload with a Buffer inside arrives byte for byte at a member whose own codec is JSON', async () => {
    const streamPrefix = await aStream();
    const bytes = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x0a, 0x22, 0x5c]); // not UTF-8
    await new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec }).send({
      key: 'k',
      payload: { name: 'blob', bytes, at: new Date(5) },
    });
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { name: 'text' } });
    const [[, fields]] = await redis.client().xrangeBuffer(keys.shardStream(streamPrefix, 0), '-', '+', 'COUNT', 1);
    expect(fields.map((f, i) => (i % 2 === 0 || i > 1 ? f.toString() : 'bytes'))).toEqual(['p', 'bytes', 'c', 'msgpack', 'k', 'k']);

    const { seen, handler } = collector();
    await aMember({ streamPrefix, memberId: 'm', handler }).start();
    await pollUntil('both entries handled', async () => seen.length === 2);
    const [binary, text] = seen.map((m) => m.payload as { name: string; bytes?: Uint8Array; at?: Date });
    expect(Buffer.from(binary.bytes!).equals(bytes)).toBe(true);
    expect(binary.at).toEqual(new Date(5));
    expect(text).toEqual({ name: 'text' });
  });

  it('an entry written with a codec the member does not know goes to the dead letters with a reason naming it; once added with `codecs`, the replay is decoded', async () => {
    const streamPrefix = await aStream();
    const reversed: PayloadCodec = {
      name: 'reversed',
      encode: (p) => [...String(p)].reverse().join(''),
      decode: (raw) => [...raw].reverse().join(''),
    };
    await new StreamProducer(redis.client(), { streamPrefix, codec: reversed }).send({ key: 'k', payload: 'hello' });
    const dead = aMember({ streamPrefix, memberId: 'first', handler: () => undefined });
    await dead.start();
    const admin = new CoordinatorAdmin(redis.client());
    const letter = await firstDeadLetter(streamPrefix);
    expect(letter.cause).toBe('undecodable');
    expect(letter.error).toMatch(/codec "reversed", which this member does not know \(it knows json, msgpack\)/);
    expect(letter.codec).toBe('reversed');
    await dead.stop();

    const { seen, handler } = collector();
    await aMember({ streamPrefix, memberId: 'second', codecs: [reversed], handler }).start();
    expect((await admin.replayDeadLetter(streamPrefix, 'group', letter.ref)).status).toBe('replayed');
    await pollUntil('the replay handled', async () => seen.length === 1);
    expect(seen[0].payload).toBe('hello');
  });

  it('a binary entry that fails keeps its bytes in the dead letter, and its replay is decoded with them', async () => {
    const streamPrefix = await aStream();
    const bytes = Buffer.from([0xc3, 0x28, 0xa0, 0xa1, 0xff]);
    await new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec }).send({ key: 'k', payload: { bytes } });
    const failing = aMember({
      streamPrefix,
      memberId: 'failing',
      maxAttempts: 1,
      handler: () => {
        throw new Error('nope');
      },
    });
    await failing.start();
    const admin = new CoordinatorAdmin(redis.client());
    const letter = await firstDeadLetter(streamPrefix);
    expect(letter.codec).toBe('msgpack');
    const stored = Buffer.from(letter.payloadBase64!, 'base64');
    expect(Buffer.from((msgpackCodec.decode(stored) as { bytes: Uint8Array }).bytes).equals(bytes)).toBe(true);
    // for people (CLI, dashboard): decoded, the bytes inside as base64
    expect(letter.payloadText).toBe(JSON.stringify({ bytes: { base64: bytes.toString('base64') } }));
    await failing.stop();

    const { seen, handler } = collector();
    await aMember({ streamPrefix, memberId: 'fixed', handler }).start();
    expect((await admin.replayDeadLetter(streamPrefix, 'group', letter.ref)).status).toBe('replayed');
    await pollUntil('the replay handled', async () => seen.length === 1);
    expect(Buffer.from((seen[0].payload as { bytes: Uint8Array }).bytes).equals(bytes)).toBe(true);
  });

  it("an entry that names no codec (written before codecs were named) is decoded with the member's own codec", async () => {
    const streamPrefix = await aStream();
    await redis.client().xadd(keys.shardStream(streamPrefix, 0), '*', 'p', '{"legacy":true}', 'k', 'k');
    const { seen, handler } = collector();
    await aMember({ streamPrefix, memberId: 'm', codec: jsonCodec, handler }).start();
    await pollUntil('the legacy entry handled', async () => seen.length === 1);
    expect(seen[0].payload).toEqual({ legacy: true });
  });

  it('names the option for a codec without a valid name', () => {
    const bad = { name: 'has space', encode: String, decode: String } as PayloadCodec;
    expect(() => new StreamProducer(redis.client(), { streamPrefix: 'x', codec: bad })).toThrow(/codec.name must be 1-64 characters/);
    expect(() => aMember({ streamPrefix: 'x', codecs: [jsonCodec, bad], handler: () => undefined })).toThrow(/codecs\[1\].name/);
  });
});

describe('schemas (Standard Schema, tested with zod 4)', () => {
  const Order = z.object({ orderId: z.string(), amount: z.number().positive(), currency: z.string().default('EUR') });

  it("an invalid entry is dead-lettered at once with the validation message; a valid one reaches the handler as the schema's output", async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'o', payload: { orderId: 'a', amount: -3 } });
    await producer.send({ key: 'o', payload: { orderId: 'b', amount: 10 } });
    let calls = 0;
    const seen: unknown[] = [];
    await aMember({
      streamPrefix,
      memberId: 'm',
      schema: Order,
      maxAttempts: 5,
      handler: (message) => {
        calls += 1;
        seen.push(message.payload);
      },
    }).start();
    const letter = await firstDeadLetter(streamPrefix);
    await pollUntil('the valid entry handled', async () => seen.length === 1);
    expect(letter.cause).toBe('invalid');
    expect(letter.attempts).toBe(0);
    expect(letter.error).toMatch(/^the payload does not match the schema: amount: .*(greater than 0|>0)/i);
    expect(calls).toBe(1);
    expect(seen).toEqual([{ orderId: 'b', amount: 10, currency: 'EUR' }]);
  });

  it('an async schema and one that throws: the first validates, the second dead-letters naming the error', async () => {
    const streamPrefix = await aStream();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'o', payload: { orderId: 'c', amount: 1 } });
    const asyncOrder = Order.refine(async (order) => order.orderId !== 'forbidden', 'forbidden id');
    const { seen, handler } = collector();
    const member = aMember({ streamPrefix, memberId: 'async', schema: asyncOrder, handler });
    await member.start();
    await pollUntil('validated asynchronously', async () => seen.length === 1);
    await member.stop();

    const throwing = {
      '~standard': {
        version: 1 as const,
        vendor: 'test',
        validate: () => {
          throw new Error('schema bug');
        },
      },
    };
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'o', payload: { orderId: 'd', amount: 1 } });
    await aMember({ streamPrefix, memberId: 'throwing', schema: throwing, handler }).start();
    const letter = await firstDeadLetter(streamPrefix);
    expect(letter.error).toBe('the schema threw: schema bug');
  });

  it('names the option when schema is not a Standard Schema', () => {
    expect(() => aMember({ streamPrefix: 'x', schema: { parse: () => 1 } as never, handler: () => undefined })).toThrow(
      /schema must be a Standard Schema v1/,
    );
  });
});
