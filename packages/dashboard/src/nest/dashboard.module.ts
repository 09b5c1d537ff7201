import { Module } from '@nestjs/common';
import { CoordinatorDashboardHost } from './dashboard.host';
import { ConfigurableModuleClass } from './dashboard.module-definition';

/**
 * The live dashboard in a Nest application, beside `CoordinatorModule.forRoot` (whose connection,
 * listeners and members it shows).
 *
 * @example
 * @Module({
 *   imports: [
 *     CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } }),
 *     CoordinatorDashboardModule.forRoot({ path: '/rsc', readOnly: true, guard: (request) => isStaff(request) }),
 *   ],
 * })
 * export class AppModule {}
 */
@Module({
  providers: [CoordinatorDashboardHost],
  exports: [CoordinatorDashboardHost],
})
export class CoordinatorDashboardModule extends ConfigurableModuleClass {}
