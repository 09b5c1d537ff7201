import { Module } from '@nestjs/common';
import { CoordinatorCoreModule } from './coordinator-core.module';
import { ConfigurableModuleClass } from './coordinator.module-definition';

/**
 * Redis Stream Coordinator for Nest: @StreamListener methods and CoordinatorConsumerProperties
 * providers become members of their consumer groups; StreamPublisher, CoordinatorAdmin and a
 * health indicator are injectable.
 *
 * Several Redis connections: give each `forRoot` a `name`; a listener or bean picks one with its
 * `connection` option (default: the unnamed one), and a named module's StreamPublisher and
 * CoordinatorAdmin are injected with `@InjectStreamPublisher(name)` / `@InjectCoordinatorAdmin(name)`.
 * Two roots with the same name (or two without one) fail the startup.
 *
 * @example
 * @Module({ imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })] })
 * export class AppModule {}
 * // or CoordinatorModule.forRootAsync({ useFactory: (config) => ({ redis: { url: config.get('REDIS_URL') } }), inject: [ConfigService] })
 * // and CoordinatorModule.forRoot({ name: 'audit', redis: { url: process.env.AUDIT_REDIS_URL } })
 */
@Module({
  imports: [CoordinatorCoreModule],
  exports: [CoordinatorCoreModule],
})
export class CoordinatorModule extends ConfigurableModuleClass {}
