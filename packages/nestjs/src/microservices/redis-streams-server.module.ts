import { type DynamicModule, type InjectionToken, Module, type ModuleMetadata } from '@nestjs/common';
import { DEFAULT_CONNECTION_NAME } from '../coordinator.constants';
import { connectionName, getCoordinatorConnectionToken } from '../coordinator.tokens';
import type { CoordinatorConnection } from '../coordinator-connection';
import { connectionOrThrow } from './module-connection';
import type { RedisStreamsServerConnectionOptions } from './redis-streams-server.options';
import { RedisStreamsServer } from './redis-streams.server';

/** `RedisStreamsServerModule.forRoot(options)`: the server's own options, and the connection it runs on. */
export interface RedisStreamsServerModuleOptions extends RedisStreamsServerConnectionOptions {
  /** The `CoordinatorModule.forRoot` connection (its `name`) whose Redis, coordinator settings and defaults the server takes. Default: the unnamed one. */
  connection?: string;
}

/** `RedisStreamsServerModule.forRootAsync(options)`: the server's options from a factory with injected dependencies. */
export interface RedisStreamsServerModuleAsyncOptions {
  connection?: string;
  imports?: ModuleMetadata['imports'];
  inject?: InjectionToken[];
  useFactory: (...args: never[]) => RedisStreamsServerConnectionOptions | Promise<RedisStreamsServerConnectionOptions>;
}

/** Injection token of the server on a connection: the class itself for the unnamed one. */
export function getRedisStreamsServerToken(connection?: string): string | typeof RedisStreamsServer {
  const name = connectionName(connection);
  return name === DEFAULT_CONNECTION_NAME ? RedisStreamsServer : `RedisStreamsServer:${name}`;
}

/**
 * Provides a RedisStreamsServer built on a `CoordinatorModule.forRoot` connection: the module's
 * Redis (connected once, closed by the module after the server), its `coordinator` settings and its
 * member `defaults` (`shardCount`, `maxAttempts`, `deadLetter`…), under the server's own options.
 * The application's microservice takes it from DI.
 *
 * @example
 * imports: [CoordinatorModule.forRoot({ redis: { url }, defaults: { shardCount: 8 } }), RedisStreamsServerModule.forRoot({ consumerGroup: 'billing' })]
 *
 * const app = await NestFactory.create(AppModule);
 * app.connectMicroservice({ strategy: app.get(RedisStreamsServer) });
 * await app.startAllMicroservices();
 * // Nest 11+, without HTTP: NestFactory.createMicroservice(AppModule, { inject: [RedisStreamsServer], useFactory: (strategy) => ({ strategy }) })
 */
@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module: its static forRoot/register methods are how Nest builds dynamic modules
export class RedisStreamsServerModule {
  static forRoot(options: RedisStreamsServerModuleOptions = {}): DynamicModule {
    const { connection, ...serverOptions } = options ?? {};
    return RedisStreamsServerModule.forRootAsync({ connection, useFactory: () => serverOptions });
  }

  static forRootAsync(options: RedisStreamsServerModuleAsyncOptions): DynamicModule {
    if (typeof options?.useFactory !== 'function') {
      throw new TypeError('RedisStreamsServerModule.forRootAsync: useFactory must be a function returning the server options');
    }
    const token = getRedisStreamsServerToken(options.connection);
    return {
      module: RedisStreamsServerModule,
      imports: options.imports ?? [],
      providers: [
        {
          provide: token,
          inject: [{ token: getCoordinatorConnectionToken(options.connection), optional: true }, ...(options.inject ?? [])],
          useFactory: async (connection: CoordinatorConnection | undefined, ...args: never[]) =>
            RedisStreamsServer.fromConnection(
              connectionOrThrow(connection, options.connection, 'RedisStreamsServerModule'),
              await options.useFactory(...args),
            ),
        },
      ],
      exports: [token],
    };
  }
}
