import { Module } from '@nestjs/common';
import { CoordinatorConsumerProperties, CoordinatorModule } from '@redis-stream-coordinator/nestjs';
import { AuditService } from './audit.service';
import { GeneratorService } from './generator.service';
import { ListenersController } from './listeners.controller';
import { Stats } from './stats';
import { SummariesController } from './summaries.controller';
import { AUDIT_GROUP, SUMMARY_STREAM, type Summary } from './summary';
import { SummaryHandlers } from './summary.handlers';

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })],
  controllers: [SummariesController, ListenersController],
  providers: [
    Stats,
    SummaryHandlers,
    AuditService,
    GeneratorService,
    {
      provide: 'auditConsumer',
      inject: [AuditService],
      useFactory: (audit: AuditService) =>
        CoordinatorConsumerProperties.consumer<Summary>({
          streamPrefix: SUMMARY_STREAM,
          consumerGroup: AUDIT_GROUP,
          id: 'audit',
          memberName: `audit-${process.pid}`,
          runtimeMaxConcurrency: 4,
          handler: (message) => audit.handle(message),
        }),
    },
  ],
})
export class AppModule {}
