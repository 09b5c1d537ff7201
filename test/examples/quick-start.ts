import { Injectable, Module } from '@nestjs/common';
import {
  CoordinatorConsumerProperties,
  CoordinatorModule,
  StreamListener,
  type StreamMessage,
} from '@redis-stream-coordinator/nestjs';

interface Summary {
  userId: string;
  text: string;
}

@Injectable()
export class AuditService {
  readonly audited: string[] = [];

  handle(message: StreamMessage<Summary>) {
    this.audited.push(`${message.key}: ${message.payload.text}`);
  }
}

@Injectable()
export class SummaryHandlers {
  readonly summarized: string[] = [];

  // Four members of summary-group: <baseId>-m0 ... -m3, one entry at a time per shard each.
  @StreamListener({ streamPrefix: 'summary', consumerGroup: 'summary-group', concurrency: 4, shardCount: 8 })
  async onSummary(message: StreamMessage<Summary>) {
    this.summarized.push(`${message.key}: ${message.payload.text}`);
  }
}

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })],
  providers: [
    SummaryHandlers,
    AuditService,
    // One member of audit-group running up to four handlers at once.
    {
      provide: 'auditConsumer',
      inject: [AuditService],
      useFactory: (audit: AuditService) =>
        CoordinatorConsumerProperties.consumer<Summary>({
          streamPrefix: 'summary',
          consumerGroup: 'audit-group',
          memberName: 'audit-a',
          runtimeMaxConcurrency: 4,
          handler: (message) => audit.handle(message),
        }),
    },
  ],
})
export class AppModule {}
