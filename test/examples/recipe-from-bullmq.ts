import { Injectable, Module } from '@nestjs/common';
import { CoordinatorModule, StreamListener, type StreamMessage, StreamPublisher } from '@redis-stream-coordinator/nestjs';

interface Email {
  template: string;
  to: string;
}

// Was: @Processor('emails', { concurrency: 4 }) export class EmailProcessor extends WorkerHost { async process(job: Job<Email>) {…} }
@Injectable()
export class EmailProcessor {
  failuresLeft = 0;
  readonly sent: string[] = [];

  // attempts: 5 and backoff: { type: 'exponential', delay: 1000 } become maxAttempts and retryBackoffMs;
  // concurrency 4 becomes lanes: 4 (entries of different keys side by side, one key in order).
  @StreamListener({ streamPrefix: 'emails', consumerGroup: 'email-worker', shardCount: 4, lanes: 4, maxAttempts: 5, retryBackoffMs: 10 })
  async process(message: StreamMessage<Email>) {
    if (this.failuresLeft-- > 0) throw new Error('SMTP timeout'); // retried in place, as a failed job
    this.sent.push(`${message.payload.template} ${message.payload.to}`);
  }
}

// Was: constructor(@InjectQueue('emails') private readonly queue: Queue) and this.queue.add('welcome', data)
@Injectable()
export class SignupService {
  constructor(private readonly publisher: StreamPublisher) {}

  signedUp(email: string) {
    // The key orders one user's e-mails; a job name becomes a field of the payload (or a header).
    return this.publisher.publish<Email>('emails', { key: email, payload: { template: 'welcome', to: email } });
  }
}

// Was: BullModule.forRoot({ connection }) and BullModule.registerQueue({ name: 'emails' })
@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [EmailProcessor, SignupService],
})
export class EmailsModule {}
