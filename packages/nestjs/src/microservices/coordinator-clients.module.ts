import { type DynamicModule, type InjectionToken, Module, type ModuleMetadata, type Provider } from '@nestjs/common';
import { getCoordinatorConnectionToken } from '../coordinator.tokens';
import type { CoordinatorConnection } from '../coordinator-connection';
import { type CoordinatorClientConnectionOptions, CoordinatorClientProxy } from './coordinator-client.proxy';
import { connectionOrThrow } from './module-connection';

/** One client of `CoordinatorClientsModule.register([...])`. */
export interface CoordinatorClientRegistration extends CoordinatorClientConnectionOptions {
  /** Its injection token: `@Inject(name) client: CoordinatorClientProxy`. */
  name: InjectionToken;
  /** The `CoordinatorModule.forRoot` connection (its `name`) it writes to and reads replies from. Default: the unnamed one. */
  connection?: string;
}

/** One client of `CoordinatorClientsModule.registerAsync([...])`: its options from a factory with injected dependencies. */
export interface CoordinatorClientAsyncRegistration {
  name: InjectionToken;
  connection?: string;
  imports?: ModuleMetadata['imports'];
  inject?: InjectionToken[];
  useFactory: (...args: never[]) => CoordinatorClientConnectionOptions | Promise<CoordinatorClientConnectionOptions>;
}

/**
 * CoordinatorClientProxy clients on `CoordinatorModule.forRoot` connections, as Nest's `ClientsModule`
 * registers its transports' clients: each under its `name`, with the module's Redis and key prefix,
 * and the module's `defaults.shardCount` and `publisher.codec` for the streams it writes unless its
 * `producer` says otherwise. A client closes (failing what still waits, deleting its reply inbox)
 * with the application, before the module's connection.
 *
 * @example
 * imports: [CoordinatorModule.forRoot({ redis: { url } }), CoordinatorClientsModule.register([{ name: 'BILLING', timeoutMs: 2000 }])]
 *
 * constructor(@Inject('BILLING') private readonly billing: CoordinatorClientProxy) {}
 */
@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module: its static forRoot/register methods are how Nest builds dynamic modules
export class CoordinatorClientsModule {
  static register(clients: CoordinatorClientRegistration[]): DynamicModule {
    return CoordinatorClientsModule.registerAsync(
      assertRegistrations(clients, 'register').map(({ name, connection, ...options }) => ({ name, connection, useFactory: () => options })),
    );
  }

  static registerAsync(clients: CoordinatorClientAsyncRegistration[]): DynamicModule {
    const providers: Provider[] = assertRegistrations(clients, 'registerAsync').map((client) => {
      if (typeof client.useFactory !== 'function') {
        throw new TypeError(
          `CoordinatorClientsModule.registerAsync: client ${String(client.name)}: useFactory must be a function returning its options`,
        );
      }
      return {
        provide: client.name,
        inject: [{ token: getCoordinatorConnectionToken(client.connection), optional: true }, ...(client.inject ?? [])],
        useFactory: async (connection: CoordinatorConnection | undefined, ...args: never[]) =>
          CoordinatorClientProxy.fromConnection(
            connectionOrThrow(connection, client.connection, `CoordinatorClientsModule: client ${String(client.name)}`),
            await client.useFactory(...args),
          ),
      };
    });
    return {
      module: CoordinatorClientsModule,
      imports: clients.flatMap((client) => client.imports ?? []),
      providers,
      exports: providers.map((provider) => (provider as { provide: InjectionToken }).provide),
    };
  }
}

/** Refuses what is not a list of clients with names, and two clients of one name. */
function assertRegistrations<T extends { name: InjectionToken }>(clients: T[], method: string): T[] {
  if (!Array.isArray(clients)) {
    throw new TypeError(`CoordinatorClientsModule.${method}: give an array of clients ([{ name: 'BILLING' }]), got ${typeof clients}`);
  }
  const names = new Set<InjectionToken>();
  for (const [i, client] of clients.entries()) {
    const name = client?.name;
    if (name === undefined || name === null || name === '') {
      throw new TypeError(`CoordinatorClientsModule.${method}: clients[${i}].name is required (the client's injection token)`);
    }
    if (names.has(name)) throw new Error(`CoordinatorClientsModule.${method}: two clients are named ${String(name)}`);
    names.add(name);
  }
  return clients;
}
