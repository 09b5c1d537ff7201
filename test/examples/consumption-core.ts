import type { Redis } from 'ioredis';
import { BatchError, CoordinatedMember, type StreamMessage } from '@redis-stream-coordinator/core';

interface Order {
  customer: string;
  cents: number;
}

export function startOrderMembers(redis: Redis, out: { charged: string[]; rows: number[]; mailed: string[] }) {
  // Lanes: up to 16 customers (routing keys) of a shard at once, each customer's orders in order.
  const billing = new CoordinatedMember<Order>(redis, {
    streamPrefix: 'orders',
    consumerGroup: 'billing',
    shardCount: 4,
    lanes: 16,
    handler: async (message) => {
      await new Promise((resolve) => setTimeout(resolve, 5)); // the payment provider's round trip
      out.charged.push(`${message.key}:${message.payload.cents}`);
    },
  });

  // Batches: up to 100 entries of one shard per call, in order, one acknowledgement for them.
  const warehouse = new CoordinatedMember<Order>(redis, {
    streamPrefix: 'orders',
    consumerGroup: 'warehouse',
    shardCount: 4,
    batch: { maxSize: 100, maxWaitMs: 50 },
    handler: async (messages: StreamMessage<Order>[]) => {
      for (const [i, message] of messages.entries()) {
        // Rows before i are kept and acknowledged; i and the rest are retried (i alone dead-lettered at the end).
        if (message.payload.cents < 0) throw new BatchError(i, new RangeError(`negative amount in ${message.id}`));
        out.rows.push(message.payload.cents);
      }
    },
  });

  // Manual acks: the entry is done when ack() is called, wherever the handler handed it on to.
  const receipts = new CoordinatedMember<Order>(redis, {
    streamPrefix: 'orders',
    consumerGroup: 'receipts',
    shardCount: 4,
    ackMode: 'manual',
    ackTimeoutMs: 10_000,
    handler: (message) => {
      setTimeout(() => {
        out.mailed.push(message.payload.customer);
        message.ack().catch((error) => console.warn(`${message.id} runs again: ${error.message}`));
      }, 1);
    },
  });
  receipts.on('ack-refused', (event) => console.warn(`ack of ${event.entryId} refused (${event.reason})`));

  const members = [billing, warehouse, receipts];
  for (const member of members) member.on('error', (error) => console.warn(error.message));
  return Promise.all(members.map((member) => member.start())).then(() => members);
}
