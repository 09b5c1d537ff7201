import { type DynamicModule, Logger, type Provider } from '@nestjs/common';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { COORDINATOR_MODULE_OPTIONS } from './coordinator.constants';
import { connectionName, getCoordinatorAdminToken, getCoordinatorConnectionToken, getStreamPublisherToken } from './coordinator.tokens';
import { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorConnections } from './coordinator-connections';
import type { CoordinatorModuleExtras, CoordinatorModuleOptions } from './coordinator-module-options';
import { StreamPublisher } from './stream-publisher';
import { ThrottledLogger } from './throttled-logger';

/**
 * What one `forRoot` adds to its dynamic module: its connection (registered with the application's
 * CoordinatorConnections, which refuses a second module of the same name), and the StreamPublisher
 * and CoordinatorAdmin of that connection under tokens of its name. The listeners are found once for
 * the whole application by the shared CoordinatorExplorer, never once per module.
 */
export function withConnectionProviders(definition: DynamicModule, extras: CoordinatorModuleExtras): DynamicModule {
  const name = connectionName(extras.name);
  const connectionToken = getCoordinatorConnectionToken(name);
  const providers: Provider[] = [
    {
      provide: connectionToken,
      inject: [COORDINATOR_MODULE_OPTIONS, CoordinatorConnections],
      useFactory: (options: CoordinatorModuleOptions, connections: CoordinatorConnections) => {
        const throttled = new ThrottledLogger(new Logger('CoordinatorModule'));
        const connection = CoordinatorConnection.fromOptions(
          options,
          (error) => throttled.warn(`redis:${name}:${error.message}`, `Redis "${name}": ${error.message}; reconnecting`),
          name,
        );
        try {
          connections.add(connection);
        } catch (error) {
          void connection.close();
          throw error;
        }
        return connection;
      },
    },
    {
      provide: getCoordinatorAdminToken(name),
      inject: [connectionToken],
      useFactory: (connection: CoordinatorConnection) => new CoordinatorAdmin(connection.client, connection.options.coordinator),
    },
    {
      provide: getStreamPublisherToken(name),
      inject: [connectionToken],
      useFactory: (connection: CoordinatorConnection) => new StreamPublisher(connection),
    },
  ];
  return {
    module: definition.module,
    imports: definition.imports,
    providers: [...(definition.providers ?? []), ...providers],
    exports: [connectionToken, getCoordinatorAdminToken(name), getStreamPublisherToken(name)],
    global: extras.isGlobal,
  };
}
