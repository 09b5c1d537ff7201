import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { CoordinatorExplorer } from './coordinator.explorer';
import { CoordinatorHealthIndicator } from './coordinator.health';
import { CoordinatorRegistry } from './coordinator.registry';
import { CoordinatorConnections } from './coordinator-connections';
import { CoordinatorMetadataAccessor } from './coordinator-metadata.accessor';
import { StreamHandlerFactory } from './stream-handler.factory';
import { StreamListenerRegistry } from './stream-listener.registry';

/**
 * What every `CoordinatorModule.forRoot` of an application shares: a static module, so Nest creates
 * it once however many roots import it. It holds the connections by name, the one explorer (so each
 * listener is found once and goes to the connection it names), the listener registry, the members,
 * and the health check.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    CoordinatorConnections,
    CoordinatorMetadataAccessor,
    StreamHandlerFactory,
    CoordinatorRegistry,
    StreamListenerRegistry,
    CoordinatorExplorer,
    CoordinatorHealthIndicator,
  ],
  exports: [CoordinatorConnections, CoordinatorRegistry, StreamListenerRegistry, CoordinatorHealthIndicator],
})
export class CoordinatorCoreModule {}
