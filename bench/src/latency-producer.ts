/**
 * The producer of the latency scenario, in a process of its own (so that its event loop does not
 * delay the consumer it measures): node dist/latency-producer.js <url> <streamPrefix> <rate> <seconds>.
 * Sends `rate` entries/s in 10 ms ticks, each carrying `sentAt` (ms since the epoch, sub-ms precise:
 * comparable across processes of one machine), and prints how many it sent.
 */
import { Redis } from 'ioredis';
import { StreamProducer } from '@redis-stream-coordinator/core';
import { runCli } from './cli';
import { sendPaced } from './paced-send';

export const now = (): number => performance.timeOrigin + performance.now();

async function main(): Promise<void> {
  const [url, streamPrefix, rateText, secondsText] = process.argv.slice(2);
  const rate = Number(rateText);
  const seconds = Number(secondsText);
  const redis = new Redis(url);
  const producer = new StreamProducer(redis, { streamPrefix });
  const sent = await sendPaced(producer, rate, seconds, now);
  redis.disconnect();
  process.stdout.write(`${sent}\n`);
}

if (require.main === module) runCli(main);
