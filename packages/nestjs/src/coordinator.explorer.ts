import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import type { StreamMessage } from '@redis-stream-coordinator/core';
import { DEFAULT_CONNECTION_NAME } from './coordinator.constants';
import { connectionName } from './coordinator.tokens';
import { CoordinatorConnections } from './coordinator-connections';
import { CoordinatorConsumerProperties } from './coordinator-consumer-properties';
import { CoordinatorMetadataAccessor } from './coordinator-metadata.accessor';
import { type MemberHandler, StreamHandlerFactory } from './stream-handler.factory';
import { StreamListenerRegistry } from './stream-listener.registry';

type Handlers = Record<string, (message: StreamMessage) => unknown>;

/**
 * Finds the listeners of the application at module init, once for all `CoordinatorModule.forRoot`
 * imports: every @StreamListener method (N logical members for `concurrency: N`), every provider
 * whose value is a CoordinatorConsumerProperties, and every entry of each module's `consumers` (one
 * member each), and gives them to StreamListenerRegistry, each with the connection it names
 * (default: the unnamed one), so none is ever registered twice. A misconfigured one is a startup
 * error that names the class, the method and the option.
 */
@Injectable()
export class CoordinatorExplorer implements OnModuleInit {
  private readonly logger = new Logger('CoordinatorModule');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly metadata: CoordinatorMetadataAccessor,
    private readonly listeners: StreamListenerRegistry,
    private readonly connections: CoordinatorConnections,
    private readonly handlers: StreamHandlerFactory,
  ) {}

  async onModuleInit(): Promise<void> {
    const groups = new Map<string, string>();
    // One provider can be reached through several wrappers (a `useExisting` alias, one value
    // provided in two modules): it is explored once.
    const seen = new Set<unknown>();
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.isAlias) continue;
      const { instance } = wrapper;
      if (!instance || typeof instance !== 'object' || seen.has(instance)) continue;
      seen.add(instance);
      if (instance instanceof CoordinatorConsumerProperties) {
        const token = typeof wrapper.token === 'string' || typeof wrapper.token === 'symbol' ? String(wrapper.token) : wrapper.name;
        const where = `bean ${String(wrapper.token?.toString?.() ?? wrapper.name)}`;
        this.listeners.addConsumer(
          instance as CoordinatorConsumerProperties<never>,
          this.connections.resolve(instance.connection, where),
          where,
          token,
        );
        continue;
      }
      await this.addListeners(wrapper, groups);
    }
    for (const connection of this.connections.all()) {
      (connection.options.consumers ?? []).forEach((properties, i) => {
        const where =
          connection.name === DEFAULT_CONNECTION_NAME ? `consumers[${i}]` : `consumers[${i}] of connection "${connection.name}"`;
        if (!(properties instanceof CoordinatorConsumerProperties)) {
          throw new TypeError(`CoordinatorModule: ${where} must be built with CoordinatorConsumerProperties.consumer(...)`);
        }
        if (properties.connection !== undefined && connectionName(properties.connection) !== connection.name) {
          throw new Error(
            `CoordinatorModule: ${where} names connection "${properties.connection}" but is given to the module "${connection.name}": leave its connection out`,
          );
        }
        this.listeners.addConsumer(
          properties,
          connection,
          where,
          connection.name === DEFAULT_CONNECTION_NAME ? `consumers[${i}]` : `${connection.name}:consumers[${i}]`,
        );
      });
    }
  }

  private async addListeners(wrapper: InstanceWrapper, groups: Map<string, string>): Promise<void> {
    const instance = wrapper.instance as object;
    const prototype = Object.getPrototypeOf(instance) as object;
    for (const method of this.scanner.getAllMethodNames(prototype)) {
      const listener = this.metadata.streamListener((instance as Handlers)[method] as (...args: unknown[]) => unknown);
      if (!listener) continue;
      const where = `${instance.constructor.name}.${method}`;
      if (!wrapper.isDependencyTreeStatic()) {
        this.logger.warn(
          `@StreamListener on ${where} is skipped: its provider is request-scoped, and a member lives as long as the application`,
        );
        continue;
      }
      const connection = this.connections.resolve(listener.connection, `@StreamListener on ${where}`);
      const groupKey = `${connection.name}:${listener.streamPrefix}/${listener.consumerGroup}`;
      const earlier = groups.get(groupKey);
      if (earlier) {
        this.logger.warn(
          `@StreamListener on ${where} and on ${earlier} join the same group ${listener.streamPrefix}/${listener.consumerGroup}: its shards are split between two different handlers`,
        );
      }
      groups.set(groupKey, where);
      await this.listeners.addListener(listener, await this.handlerSource(wrapper, method), `@StreamListener on ${where}`, where);
    }
  }

  /**
   * Gives each member the instance its handler runs on, wrapped in Nest's pipeline (guards,
   * interceptors, pipes, filters: StreamHandlerFactory). A singleton's is the one instance. A
   * transient provider's static instance is a bare prototype that Nest never constructed (no
   * dependencies injected), so each member resolves an instance of its own, once, which it keeps
   * for its lifetime: what Scope.TRANSIENT promises every consumer of a provider.
   */
  private async handlerSource(wrapper: InstanceWrapper, method: string): Promise<() => Promise<MemberHandler>> {
    if (!wrapper.isTransient) {
      const handler = this.handlers.create(wrapper.instance as object, method);
      return async () => handler;
    }
    const moduleRef = wrapper.host?.getProviderByKey(ModuleRef)?.instance as ModuleRef | undefined;
    if (!moduleRef) throw new Error(`@StreamListener on ${wrapper.name}.${method}: the module of its transient provider cannot be found`);
    return async () => {
      const instance = (await moduleRef.resolve(wrapper.token, undefined, { strict: true })) as Handlers;
      return this.handlers.create(instance, method);
    };
  }
}
