import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  type DeadLetterEvent,
  type PayloadCodec,
  type StreamMessage,
  StreamProducer,
  msgpackCodec,
} from '@redis-stream-coordinator/core';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';
import { afterEach } from 'vitest';

// Where feat/lanes (lanes, batch handlers, manual acks) meets feat/static (codecs named per entry,
// binary payloads, Standard Schema validation): every entry of a batch or a lane is decoded with its
// own codec and checked on its own, and one that fails either is dead-lettered in place.
const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 100 } });
const started: CoordinatedMember<unknown>[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

const BYTES = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x0a, 0x22, 0x5c]); // not UTF-8: survives only as bytes
/** A codec no member here knows: its entries are undecodable. */
const reversed: PayloadCodec = {
  name: 'reversed',
  encode: (p) => [...String(p)].reverse().join(''),
  decode: (raw) => [...raw].reverse().join(''),
};
const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function aStream(shardCount = 1) {
  const streamPrefix = uniqueName('codec-use');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

describe('codecs and schemas with batches and lanes', () => {
  it("a batch handler gets JSON and msgpack entries decoded with their own codecs and the schema's output; a schema-invalid and an undecodable entry are dead-lettered in place, the batch split around them", async () => {
    const streamPrefix = await aStream();
    const json = new StreamProducer(redis.client(), { streamPrefix });
    const msgpack = new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec });
    const unknown = new StreamProducer(redis.client(), { streamPrefix, codec: reversed });
    const ids = new Map<string, number>();
    const sent = async (n: number, write: Promise<{ id: string }>) => ids.set((await write).id, n);
    await sent(1, json.send({ key: 'a', payload: { n: 1 } }));
    await sent(2, msgpack.send({ key: 'b', payload: { n: 2, bytes: BYTES } }));
    await sent(3, msgpack.send({ key: 'a', payload: { n: -3, bytes: BYTES } })); // the schema refuses it
    await sent(4, json.send({ key: 'b', payload: { n: 4 } }));
    await sent(5, unknown.send({ key: 'a', payload: 'five' })); // a codec the member does not know
    await sent(6, msgpack.send({ key: 'a', payload: { n: 6, bytes: BYTES } }));

    const Item = z.object({ n: z.number().int().positive(), bytes: z.instanceof(Uint8Array).optional(), tag: z.string().default('none') });
    const timeline: string[] = [];
    const payloads: z.infer<typeof Item>[] = [];
    const member = new CoordinatedMember<z.infer<typeof Item>>(redis.client(), {
      streamPrefix,
      consumerGroup: 'group',
      memberId: 'batcher',
      coordinator: { heartbeatIntervalMs: 100 },
      schema: Item,
      batch: { maxSize: 10 },
      handler: (messages: StreamMessage<z.infer<typeof Item>>[]) => {
        timeline.push(`call ${messages.map((m) => m.payload.n).join(',')}`);
        payloads.push(...messages.map((m) => m.payload));
      },
    });
    member.on('error', () => undefined);
    member.on('dead-letter', (event: DeadLetterEvent) => timeline.push(`dead ${ids.get(event.id)} ${event.cause}`));
    started.push(member as CoordinatedMember<unknown>);
    // Started after everything was written: the first read queues all six, so they meet in one batch.
    await member.start();
    await pollUntil('every entry handled or dead-lettered', async () => timeline.length === 5);

    // Before the merge the batch path decoded every entry with the member's own codec (JSON) and
    // checked no schema: entries 2 and 6 were undecodable and entry 3 reached the handler.
    expect(timeline).toEqual(['call 1,2', 'dead 3 invalid', 'call 4', 'dead 5 undecodable', 'call 6']);
    const [one, two, , six] = payloads;
    expect(one).toEqual({ n: 1, tag: 'none' }); // the schema's output: its default applied
    expect(Buffer.from(two.bytes!).equals(BYTES)).toBe(true);
    expect(Buffer.from(six.bytes!).equals(BYTES)).toBe(true);

    const admin = new CoordinatorAdmin(redis.client());
    const letters = await admin.readDeadLetters(streamPrefix, 'group');
    const byN = new Map(letters.map((letter) => [ids.get(letter.entryId), letter]));
    expect(byN.get(3)).toMatchObject({ cause: 'invalid', attempts: 0, codec: 'msgpack' });
    expect(byN.get(3)!.error).toMatch(/^the payload does not match the schema: n: /);
    expect(Buffer.from(byN.get(3)!.payloadBase64!, 'base64').includes(BYTES)).toBe(true); // the bytes are kept
    expect(byN.get(5)).toMatchObject({ cause: 'undecodable', codec: 'reversed' });
    expect(byN.get(5)!.error).toMatch(/codec "reversed", which this member does not know/);
    await pollUntil('nothing left pending', async () =>
      (await admin.describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
    );
  });

  it('with lanes and manual acks, a msgpack entry that an async schema refuses holds only its key: other keys run on, its key goes on after its dead letter', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec });
    const Reading = z
      .object({ seq: z.number(), bytes: z.instanceof(Uint8Array) })
      // Slow for the one it refuses, so that other keys have all the time to overtake it.
      .refine(async (reading) => (reading.seq === -1 ? pause(600).then(() => false) : true), 'seq -1 is refused');
    const events: string[] = [];
    const bytesIntact: boolean[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'laned',
      lanes: 4,
      ackMode: 'manual',
      ackTimeoutMs: 5000,
      schema: Reading,
      handler: (message) => {
        const payload = message.payload as unknown as z.infer<typeof Reading>;
        events.push(`start ${message.key}:${payload.seq}`);
        bytesIntact.push(Buffer.from(payload.bytes).equals(BYTES));
        setTimeout(() => void message.ack().catch(() => undefined), 5); // acked from elsewhere
      },
    });
    member.on('dead-letter', (event) => events.push(`dead ${event.cause}`));
    await member.start();
    const messages = [
      { key: 'a', payload: { seq: 0, bytes: BYTES } },
      { key: 'a', payload: { seq: -1, bytes: BYTES } },
      { key: 'a', payload: { seq: 2, bytes: BYTES } },
      ...['b', 'c'].flatMap((key) => [0, 1, 2, 3].map((seq) => ({ key, payload: { seq, bytes: BYTES } }))),
    ];
    await producer.sendBatch(messages);
    await pollUntil('every entry handled or dead-lettered', async () => events.length === messages.length);

    expect(bytesIntact.every(Boolean)).toBe(true);
    const of = (key: string) => events.filter((e) => e.startsWith(`start ${key}:`));
    expect(of('a')).toEqual(['start a:0', 'start a:2']);
    expect(of('b')).toEqual(['start b:0', 'start b:1', 'start b:2', 'start b:3']);
    expect(of('c')).toEqual(['start c:0', 'start c:1', 'start c:2', 'start c:3']);
    const dead = events.indexOf('dead invalid');
    // Key a's next entry waited for the dead letter; keys b and c did not wait for key a.
    expect(events.indexOf('start a:2')).toBeGreaterThan(dead);
    expect(events.indexOf('start b:3')).toBeLessThan(dead);
    expect(events.indexOf('start c:3')).toBeLessThan(dead);
    const letters = await new CoordinatorAdmin(redis.client()).readDeadLetters(streamPrefix, 'group');
    expect(letters.map((l) => [l.key, l.cause, l.error])).toEqual([
      ['a', 'invalid', 'the payload does not match the schema: seq -1 is refused'],
    ]);
  });
});
