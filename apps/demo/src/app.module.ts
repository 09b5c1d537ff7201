import { Module } from '@nestjs/common';
import { CoordinatorDashboardModule } from '@redis-stream-coordinator/dashboard/nest';
import { CoordinatorConsumerProperties, CoordinatorModule } from '@redis-stream-coordinator/nestjs';
import type { IncomingMessage } from 'node:http';
import { AuditService } from './audit.service';
import { GeneratorService } from './generator.service';
import { ListenersController } from './listeners.controller';
import { MetricsController } from './metrics.controller';
import { Stats } from './stats';
import { SummariesController } from './summaries.controller';
import { AUDIT_GROUP, SUMMARY_STREAM, type Summary } from './summary';
import { SummaryHandlers } from './summary.handlers';
import { env } from './environment';

@Module({
  imports: [
    CoordinatorModule.forRoot({ redis: { url: env('REDIS_URL') } }),
    // The live dashboard at /rsc/. Actions (pause/resume, replay/purge, resize) stay off unless
    // DEMO_DASHBOARD_ACTIONS=1; either way only this machine may open it.
    CoordinatorDashboardModule.forRoot({
      path: '/rsc',
      readOnly: env('DEMO_DASHBOARD_ACTIONS') !== '1',
      guard: (request) => isLoopback(request),
    }),
  ],
  controllers: [SummariesController, ListenersController, MetricsController],
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
          runtimeMaxConcurrency: 4,
          handler: (message) => audit.handle(message),
        }),
    },
  ],
})
export class AppModule {}

/** The demo's guard: requests from this machine only (a real application checks its users here). */
function isLoopback(request: IncomingMessage): boolean {
  const address = request.socket.remoteAddress ?? '';
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}
