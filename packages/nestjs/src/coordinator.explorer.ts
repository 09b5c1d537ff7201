import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { CoordinatedMember, type CoordinatedMemberOptions, type StreamMessage } from '@redis-stream-coordinator/core';
import { v7 as uuidv7 } from 'uuid';
import { DEFAULT_CONNECTION_NAME } from './coordinator.constants';
import { CoordinatorRegistry } from './coordinator.registry';
import { connectionName } from './coordinator.tokens';
import type { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorConnections } from './coordinator-connections';
import { CoordinatorConsumerProperties, providerMethodOf } from './coordinator-consumer-properties';
import { CoordinatorMetadataAccessor } from './coordinator-metadata.accessor';
import { type MemberHandler, StreamHandlerFactory } from './stream-handler.factory';
import type { StreamListenerOptions } from './stream-listener.decorator';

const MAX_LISTENER_CONCURRENCY = 1024;

type Handlers = Record<string, (message: StreamMessage) => unknown>;

/**
 * Finds the members of the application at module init, once for all `CoordinatorModule.forRoot`
 * imports: every @StreamListener method (N logical members for `concurrency: N`), every provider
 * whose value is a CoordinatorConsumerProperties, and every entry of each module's `consumers` (one
 * member each). Each goes to the connection it names (default: the unnamed one), so none is ever
 * registered twice. A misconfigured one is a startup error that names the class, the method and
 * the option.
 */
@Injectable()
export class CoordinatorExplorer implements OnModuleInit {
  private readonly logger = new Logger('CoordinatorModule');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly metadata: CoordinatorMetadataAccessor,
    private readonly registry: CoordinatorRegistry,
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
        const where = `bean ${String(wrapper.token?.toString?.() ?? wrapper.name)}`;
        this.addBean(instance as CoordinatorConsumerProperties<never>, this.connectionFor(instance.connection, where), where);
        continue;
      }
      await this.addListeners(wrapper, groups);
    }
    for (const connection of this.connections.all()) {
      (connection.options.consumers ?? []).forEach((properties, i) => {
        const where = connection.name === DEFAULT_CONNECTION_NAME ? `consumers[${i}]` : `consumers[${i}] of connection "${connection.name}"`;
        if (!(properties instanceof CoordinatorConsumerProperties)) {
          throw new TypeError(`CoordinatorModule: ${where} must be built with CoordinatorConsumerProperties.consumer(...)`);
        }
        if (properties.connection !== undefined && connectionName(properties.connection) !== connection.name) {
          throw new Error(`CoordinatorModule: ${where} names connection "${properties.connection}" but is given to the module "${connection.name}": leave its connection out`);
        }
        this.addBean(properties, connection, where);
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
        this.logger.warn(`@StreamListener on ${where} is skipped: its provider is request-scoped, and a member lives as long as the application`);
        continue;
      }
      const connection = this.connectionFor(listener.connection, `@StreamListener on ${where}`);
      const groupKey = `${connection.name}:${listener.streamPrefix}/${listener.consumerGroup}`;
      const earlier = groups.get(groupKey);
      if (earlier) {
        this.logger.warn(`@StreamListener on ${where} and on ${earlier} join the same group ${listener.streamPrefix}/${listener.consumerGroup}: its shards are split between two different handlers`);
      }
      groups.set(groupKey, where);
      await this.addListener(listener, connection, await this.handlerSource(wrapper, method), where);
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

  private async addListener(
    listener: StreamListenerOptions,
    connection: CoordinatorConnection,
    nextHandler: () => Promise<MemberHandler>,
    where: string,
  ): Promise<void> {
    const { concurrency = 1, connection: _connection, ...options } = listener;
    if (typeof concurrency !== 'number' || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_LISTENER_CONCURRENCY) {
      throw new RangeError(`@StreamListener on ${where}: concurrency must be an integer from 1 to ${MAX_LISTENER_CONCURRENCY}, got ${JSON.stringify(concurrency)}`);
    }
    const baseId = uuidv7();
    const baseName = options.memberName ?? where;
    for (let i = 0; i < concurrency; i++) {
      const handler = await nextHandler();
      this.add(
        connection,
        { ...options, memberId: `${baseId}-m${i}`, memberName: `${baseName}-m${i}`, runtimeMaxConcurrency: options.runtimeMaxConcurrency ?? 1 },
        `@StreamListener on ${where}`,
        handler,
      );
    }
  }

  private addBean(properties: CoordinatorConsumerProperties<never>, connection: CoordinatorConnection, where: string): void {
    const { handler, ...options } = properties.options as CoordinatedMemberOptions;
    const target = providerMethodOf(handler);
    this.add(connection, options, where, target ? this.handlers.create(target.instance, target.method) : handler);
  }

  /** The connection a listener or bean names: a name no `forRoot` has is a startup error. */
  private connectionFor(name: string | undefined, where: string): CoordinatorConnection {
    if (name !== undefined && (typeof name !== 'string' || name === '')) {
      throw new TypeError(`${where}: connection must be a non-empty string, got ${JSON.stringify(name)}`);
    }
    const connection = this.connections.get(connectionName(name));
    if (connection) return connection;
    const known = this.connections.names().map((n) => `"${n}"`).join(', ');
    throw new Error(
      name === undefined
        ? `${where}: it names no connection and there is no unnamed CoordinatorModule.forRoot (connections: ${known}): give it connection: "<name>"`
        : `${where}: connection "${name}" is not the name of any CoordinatorModule.forRoot (connections: ${known})`,
    );
  }

  /** Creates one member; its handler gets the entry and that member (its id and epoch go into the StreamContext). */
  private add(connection: CoordinatorConnection, options: Omit<CoordinatedMemberOptions, 'handler'>, where: string, handler: MemberHandler): void {
    let member: CoordinatedMember;
    try {
      member = new CoordinatedMember(connection.client, {
        ...connection.options.defaults,
        ...options,
        handler: typeof handler === 'function' ? (message) => handler(message, member) : handler,
        coordinator: { ...connection.options.coordinator, ...options.coordinator },
      });
    } catch (error) {
      // Same error class, with where the bad option came from in front of the message.
      const original = error as Error;
      const ErrorClass = original.constructor as new (message: string) => Error;
      throw new ErrorClass(`${where}: ${original.message}`);
    }
    this.registry.register(member, where, connection);
  }
}
