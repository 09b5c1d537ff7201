import type { Redis } from 'ioredis';
import { z } from 'zod';
import { CoordinatedMember, StreamProducer, msgpackCodec } from '@redis-stream-coordinator/core';

// What every order entry must look like; zod 4 is a Standard Schema (valibot, ArkType work too).
export const Order = z.object({ orderId: z.string(), amount: z.number().positive(), receipt: z.instanceof(Uint8Array).optional() });
export type Order = z.infer<typeof Order>;

// Producers may write MessagePack (binary-safe: a Buffer inside the payload arrives as bytes).
export function orderProducer(redis: Redis) {
  return new StreamProducer(redis, { streamPrefix: 'orders', codec: msgpackCodec });
}

// One member per pod, named after it: a restart of the pod within sessionTimeoutMs takes its
// shards back with a new epoch, and no other member's shards move.
export function billingMember(redis: Redis, pod: string, bill: (order: Order) => Promise<void>) {
  return new CoordinatedMember<Order>(redis, {
    streamPrefix: 'orders',
    consumerGroup: 'billing',
    memberInstanceId: `billing-${pod}`,
    sessionTimeoutMs: 30_000,
    shardCount: 8,
    schema: Order, // an entry that does not match goes to the dead letters (cause 'invalid')
    handler: (message) => bill(message.payload), // entries of any codec the member knows (json, msgpack)
  });
}
