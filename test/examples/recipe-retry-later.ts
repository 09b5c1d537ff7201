import { Injectable, Module } from '@nestjs/common';
import { CoordinatorAdmin, CoordinatorModule, StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';

export class MailServerDownError extends Error {
  override readonly name = 'MailServerDownError';
}

@Injectable()
export class Mailer {
  up = true;
  readonly sent: string[] = [];

  async send(to: string) {
    if (!this.up) throw new MailServerDownError(`cannot reach the mail server for ${to}`);
    this.sent.push(to);
  }
}

@Injectable()
export class InvoiceMails {
  constructor(private readonly mailer: Mailer) {}

  // Two quick attempts, then the entry waits in the dead-letter stream: the shard goes on at once.
  @StreamListener({ streamPrefix: 'invoices', consumerGroup: 'invoice-mails', shardCount: 2, maxAttempts: 2, retryBackoffMs: 10 })
  async onInvoice(message: StreamMessage<{ email: string }>) {
    await this.mailer.send(message.payload.email);
  }
}

/** Call it every few minutes (a cron job, @nestjs/schedule's @Interval): the mails that failed for an outage go out again. */
@Injectable()
export class RetryLater {
  constructor(private readonly admin: CoordinatorAdmin) {}

  retryMailOutages(olderThanMs = 5 * 60_000) {
    return this.admin.replayDeadLetters('invoices', 'invoice-mails', {
      errorContains: 'MailServerDownError',
      until: Date.now() - olderThanMs,
    });
  }
}

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [Mailer, InvoiceMails, RetryLater],
})
export class InvoicesModule {}
