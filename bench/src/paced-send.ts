import type { StreamProducer } from '@redis-stream-coordinator/core';

/**
 * Sends `rate` keyed entries/s for `seconds`, in 10 ms ticks (a tick that falls behind is sent at
 * once), each with `sentAt: stamp()`; returns how many it sent. The latency scenarios' producer.
 */
export async function sendPaced(producer: StreamProducer, rate: number, seconds: number, stamp: () => number): Promise<number> {
  const tickMs = 10;
  const perTick = Math.round((rate * tickMs) / 1000);
  const begin = performance.now();
  let sent = 0;
  for (let tick = 0; performance.now() - begin < seconds * 1000; tick++) {
    const wait = begin + tick * tickMs - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    await producer.sendBatch(Array.from({ length: perTick }, (_, i) => ({ key: `k${sent + i}`, payload: { sentAt: stamp() } })));
    sent += perTick;
  }
  return sent;
}
