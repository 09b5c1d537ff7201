import { Logger, Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { COORDINATOR_CONNECTION } from './coordinator.constants';
import { CoordinatorExplorer } from './coordinator.explorer';
import { CoordinatorHealthIndicator } from './coordinator.health';
import { COORDINATOR_MODULE_OPTIONS, ConfigurableModuleClass } from './coordinator.module-definition';
import { CoordinatorRegistry } from './coordinator.registry';
import { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorMetadataAccessor } from './coordinator-metadata.accessor';
import type { CoordinatorModuleOptions } from './coordinator-module-options';
import { StreamPublisher } from './stream-publisher';
import { ThrottledLogger } from './throttled-logger';

/**
 * Redis Stream Coordinator for Nest: @StreamListener methods and CoordinatorConsumerProperties
 * providers become members of their consumer groups; StreamPublisher, CoordinatorAdmin and a
 * health indicator are injectable.
 *
 * @example
 * @Module({ imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })] })
 * export class AppModule {}
 * // or CoordinatorModule.forRootAsync({ useFactory: (config) => ({ redis: { url: config.get('REDIS_URL') } }), inject: [ConfigService] })
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: COORDINATOR_CONNECTION,
      inject: [COORDINATOR_MODULE_OPTIONS],
      useFactory: (options: CoordinatorModuleOptions) => {
        const throttled = new ThrottledLogger(new Logger('CoordinatorModule'));
        return CoordinatorConnection.fromOptions(options, (error) => throttled.warn(`redis:${error.message}`, `Redis: ${error.message}; reconnecting`));
      },
    },
    {
      provide: CoordinatorAdmin,
      inject: [COORDINATOR_CONNECTION, COORDINATOR_MODULE_OPTIONS],
      useFactory: (connection: CoordinatorConnection, options: CoordinatorModuleOptions) =>
        new CoordinatorAdmin(connection.client, options.coordinator),
    },
    CoordinatorMetadataAccessor,
    CoordinatorRegistry,
    CoordinatorExplorer,
    StreamPublisher,
    CoordinatorHealthIndicator,
  ],
  exports: [CoordinatorAdmin, StreamPublisher, CoordinatorRegistry, CoordinatorHealthIndicator, COORDINATOR_CONNECTION],
})
export class CoordinatorModule extends ConfigurableModuleClass {}
