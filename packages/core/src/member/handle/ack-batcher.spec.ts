import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { ShardClient } from '../../redis/shard-client';
import { AckBatcher } from './ack-batcher';
import type { PollerEvents, ShardState } from '../shard-state';

/** A shard client whose acks answer only when the test says so. */
function aSlowClient() {
  const pending: (() => void)[] = [];
  const client = {
    ack: () => new Promise((resolve) => pending.push(() => resolve({ acked: 1 }))),
    ackMany: (batches: unknown[]) => new Promise((resolve) => pending.push(() => resolve(batches.map(() => ({ acked: 1 }))))),
  } as unknown as ShardClient;
  return {
    client,
    answerAll: () => {
      for (const answer of pending.splice(0)) answer();
    },
    sent: () => pending.length,
  };
}

const aShard = (index: number): ShardState => ({ index, grantEpoch: 7 }) as unknown as ShardState;
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** Waits (each turn, at most `withinMs`) until `count` sends are out. */
async function pollSent(sent: () => number, count: number, withinMs = 1000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (sent() < count) {
    if (Date.now() > deadline) throw new Error(`${sent()} sends, not ${count}, after ${withinMs} ms`);
    await nextTurn();
  }
}

describe('AckBatcher', () => {
  it('flush() waits for acks already being sent, not only for the batches it sends itself (a stopping member must not leave before they land)', async () => {
    // Found by the cluster soak (ca15816, docs/reliability-cluster.md): a graceful stop's final flush found no batch (the burst's own flush
    // had just taken it) and returned while that ack (with its WAIT for a replica) was on the wire;
    // the member left, the next owner got the shard, and the entry was run again.
    const { client, answerAll, sent } = aSlowClient();
    const acks = new AckBatcher(client, new EventEmitter<PollerEvents>(), () => false);
    acks.queue(aShard(0), '1-0');
    await pollSent(sent, 1); // the linger passed: its flush takes the batch and sends it
    let flushed = false;
    const flushing = acks.flush().then(() => (flushed = true));
    await nextTurn();
    expect(flushed).toBe(false);
    expect(acks.unsettledIds(0).has('1-0')).toBe(true);
    answerAll();
    await flushing;
    expect(acks.unsettledIds(0).has('1-0')).toBe(false);
  });

  it('lets acks nobody awaits gather for the linger, and sends awaited ones and large batches at the end of the turn', async () => {
    const { client, sent } = aSlowClient();
    // A linger long enough that no turn of the event loop outlasts it here.
    const acks = new AckBatcher(client, new EventEmitter<PollerEvents>(), () => false, undefined, 1000);
    acks.queue(aShard(0), '1-0');
    acks.queue(aShard(1), '2-0');
    await nextTurn();
    expect(sent()).toBe(0);
    await pollSent(sent, 1, 3000);
    expect(sent()).toBe(1); // both shards in one call

    acks.queue(aShard(0), '3-0', () => undefined); // manual ack(): someone waits on it
    await nextTurn();
    expect(sent()).toBe(2);

    acks.queue(
      aShard(0),
      Array.from({ length: 512 }, (_, i) => `${10 + i}-0`),
    );
    await nextTurn();
    expect(sent()).toBe(3);
  });
});
