import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { SUMMARY_STREAM, type Summary } from './summary';
import { env } from './environment';

/** With DEMO_RATE=<events per second>, publishes summaries of 50 users on its own. */
@Injectable()
export class GeneratorService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('Generator');
  private timer: NodeJS.Timeout | undefined;
  private sent = 0;

  constructor(private readonly publisher: StreamPublisher) {}

  onApplicationBootstrap(): void {
    const rate = Number(env('DEMO_RATE') ?? 0);
    if (!Number.isFinite(rate) || rate <= 0) return;
    const perTick = Math.max(1, Math.round(rate / 10));
    this.logger.log(`publishing about ${perTick * 10} summaries/s (DEMO_RATE=${rate})`);
    this.timer = setInterval(() => {
      const batch = Array.from({ length: perTick }, (): { key: string; payload: Summary } => {
        const userId = `user-${Math.floor(Math.random() * 50)}`;
        this.sent += 1;
        return { key: userId, payload: { userId, text: `summary #${this.sent}`, at: new Date().toISOString() } };
      });
      this.publisher.publishBatch(SUMMARY_STREAM, batch).catch((error: Error) => this.logger.warn(`publish failed: ${error.message}`));
    }, 100);
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }
}
