import { Injectable } from '@nestjs/common';
import {
  checkOption,
  type BatchOptions,
  CoordinatedMember,
  type CoordinatedMemberOptions,
  type CoordinatedMemberSettings,
  type MessageHandler,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { v7 as uuidv7 } from 'uuid';
import { CoordinatorRegistry, type RegisteredMember } from './coordinator.registry';
import type { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorConnections } from './coordinator-connections';
import { CoordinatorConsumerProperties, providerMethodOf } from './coordinator-consumer-properties';
import { type MemberHandler, StreamHandlerFactory } from './stream-handler.factory';
import { fromDefaults, mergeDeadLetter, workersOf } from './member-defaults';
import { defaultMemberName } from './member-names';
import { StreamListenerContainer } from './stream-listener.container';
import type { StreamListenerOptions } from './stream-listener.decorator';

/** How the explorer names a discovered listener: `@StreamListener on Class.method`. */
const DISCOVERED = '@StreamListener on ';

/** Options of a listener registered at runtime: a @StreamListener's, with its id required. */
export type RuntimeListenerOptions = StreamListenerOptions & { id: string };

/**
 * Every listener and bean consumer of the application by id, each as a container to control at
 * runtime (Spring's `KafkaListenerEndpointRegistry`): `get(id)` to pause, resume, stop, start or
 * resize it, `getAll()`, and `registerListener` / `registerConsumer` to add one while the
 * application runs. The members themselves (for health and shutdown) are in CoordinatorRegistry.
 *
 * @example
 * @Controller('listeners')
 * export class ListenersController {
 *   constructor(private readonly listeners: StreamListenerRegistry) {}
 *   @Post(':id/pause') pause(@Param('id') id: string) { this.listeners.getOrThrow(id).pause(); }
 *   @Post(':id/resume') resume(@Param('id') id: string) { this.listeners.getOrThrow(id).resume(); }
 * }
 */
@Injectable()
export class StreamListenerRegistry {
  private readonly containers = new Map<string, StreamListenerContainer>();

  constructor(
    private readonly registry: CoordinatorRegistry,
    private readonly connections: CoordinatorConnections,
    private readonly handlers: StreamHandlerFactory,
  ) {}

  /** The container with this id, or undefined. */
  get(id: string): StreamListenerContainer | undefined {
    return this.containers.get(id);
  }

  /** The container with this id; an Error naming the id and the known ids if there is none. */
  getOrThrow(id: string): StreamListenerContainer {
    const container = this.containers.get(id);
    if (!container)
      throw new Error(
        `StreamListenerRegistry: no listener or consumer with id ${JSON.stringify(id)} (ids: ${this.ids()
          .map((i) => JSON.stringify(i))
          .join(', ')})`,
      );
    return container;
  }

  getAll(): StreamListenerContainer[] {
    return [...this.containers.values()];
  }

  ids(): string[] {
    return [...this.containers.keys()];
  }

  /**
   * Adds a listener while the application runs, as `@StreamListener(options)` would at startup; it
   * starts at once unless `autoStartup: false` (before bootstrap: with the others). `handler` is a
   * function (called as it is) or `CoordinatorConsumerProperties.providerMethod(instance, 'method')`
   * (run through Nest's pipeline). A bad option or a taken id is an error naming it.
   *
   * @example
   * await registry.registerListener({ id: 'tenant-42', streamPrefix: 'tenant-42', consumerGroup: 'g', concurrency: 2 },
   *   CoordinatorConsumerProperties.providerMethod(this.tenants, 'handle'));
   */
  async registerListener(options: RuntimeListenerOptions, handler: MessageHandler<never>): Promise<StreamListenerContainer> {
    const where = `listener "${options?.id}"`;
    if (typeof handler !== 'function') throw new TypeError(`${where}: handler must be a function, got ${typeof handler}`);
    const target = providerMethodOf(handler);
    const memberHandler = target ? this.handlers.create(target.instance, target.method) : (handler as unknown as MemberHandler);
    const container = await this.addListener(options, async () => memberHandler, where, undefined);
    return this.startIfRunning(container);
  }

  /** Adds a bean consumer while the application runs, as a provider of that value would at startup. */
  async registerConsumer(properties: CoordinatorConsumerProperties<never>): Promise<StreamListenerContainer> {
    if (!(properties instanceof CoordinatorConsumerProperties)) {
      throw new TypeError('StreamListenerRegistry.registerConsumer: give it CoordinatorConsumerProperties.consumer(...)');
    }
    const where = `consumer "${properties.id ?? properties.options?.memberName ?? 'unnamed'}"`;
    if (properties.id === undefined) throw new TypeError(`StreamListenerRegistry.registerConsumer: ${where} needs an id`);
    const container = this.addConsumer(properties, this.connections.resolve(properties.connection, where), where, properties.id);
    return this.startIfRunning(container);
  }

  /** @internal A listener found at startup, or registered at runtime: `concurrency` members (`-m0` …). */
  async addListener(
    listener: StreamListenerOptions,
    nextHandler: () => Promise<MemberHandler>,
    where: string,
    defaultId: string | undefined,
  ): Promise<StreamListenerContainer> {
    if (listener === null || typeof listener !== 'object') throw new TypeError(`${where}: options must be an object`);
    const { concurrency = 1, connection: connectionName, id, autoStartup = true, ...options } = listener;
    checkOption('nestjs.concurrency', concurrency, { label: `${where}: concurrency` });
    const listenerId = this.checkId(id, defaultId, autoStartup, where);
    const connection = this.connections.resolve(connectionName, where);
    const baseId = uuidv7();
    const label = where.startsWith(DISCOVERED) ? where.slice(DISCOVERED.length) : listenerId;
    // A name given is the application's; the default one says which process the member runs in.
    const nameOf = (i: number) =>
      options.memberName === undefined ? defaultMemberName(`${label}-m${i}`, options.memberInstanceId) : `${options.memberName}-m${i}`;
    const createMember = async (i: number, start: boolean) =>
      this.createMember(
        connection,
        {
          ...options,
          // A static listener's members are named after its memberInstanceId, so the next process finds them.
          ...(options.memberInstanceId === undefined
            ? { memberId: `${baseId}-m${i}` }
            : { memberId: `${options.memberInstanceId}-m${i}`, memberInstanceId: `${options.memberInstanceId}-m${i}` }),
          memberName: nameOf(i),
        },
        where,
        await nextHandler(),
        { listenerId, autoStartup: start },
      );
    const entries: RegisteredMember[] = [];
    for (let i = 0; i < concurrency; i++) entries.push(await createMember(i, autoStartup));
    const container = new StreamListenerContainer(listenerId, 'listener', where, this.registry, entries, autoStartup, (i) =>
      createMember(i, false),
    );
    this.containers.set(listenerId, container);
    return container;
  }

  /** @internal A bean consumer: exactly one member. */
  addConsumer(
    properties: CoordinatorConsumerProperties<never>,
    connection: CoordinatorConnection,
    where: string,
    defaultId: string,
  ): StreamListenerContainer {
    const { handler, ...options } = properties.options as CoordinatedMemberOptions;
    const listenerId = this.checkId(properties.id, defaultId, properties.autoStartup, where);
    const target = providerMethodOf(handler);
    const named = { ...options, memberName: options.memberName ?? defaultMemberName(listenerId, options.memberInstanceId) };
    const entry = this.createMember(connection, named, where, target ? this.handlers.create(target.instance, target.method) : handler, {
      listenerId,
      autoStartup: properties.autoStartup,
    });
    const container = new StreamListenerContainer(listenerId, 'consumer', where, this.registry, [entry], properties.autoStartup);
    this.containers.set(listenerId, container);
    return container;
  }

  /**
   * An id given explicitly must be free (two listeners with one id is a mistake to report). A
   * default id (`Class.method`, a bean's token) that is taken, e.g. by two classes of one name in
   * two modules, gets `#2`, `#3`… in discovery order.
   */
  private checkId(id: unknown, defaultId: string | undefined, autoStartup: unknown, where: string): string {
    if (typeof autoStartup !== 'boolean')
      throw new TypeError(`${where}: autoStartup must be a boolean, got ${JSON.stringify(autoStartup)}`);
    if (id === undefined && defaultId !== undefined) {
      let unique = defaultId;
      for (let n = 2; this.containers.has(unique); n++) unique = `${defaultId}#${n}`;
      return unique;
    }
    if (typeof id !== 'string' || id === '') throw new TypeError(`${where}: id must be a non-empty string, got ${JSON.stringify(id)}`);
    const taken = this.containers.get(id);
    if (taken) throw new Error(`${where}: id "${id}" is already the id of ${taken.source}: give each listener and consumer its own id`);
    return id;
  }

  /** A container registered after bootstrap starts now (before it, bootstrap starts it with the others). */
  private async startIfRunning(container: StreamListenerContainer): Promise<StreamListenerContainer> {
    if (container.isRunning() && this.registry.isBootstrapped) await container.start();
    return container;
  }

  /** Creates one member and registers it; its handler gets the entry and that member (its id and epoch go into the StreamContext). */
  private createMember(
    connection: CoordinatorConnection,
    options: CoordinatedMemberSettings & { batch?: BatchOptions },
    where: string,
    handler: MemberHandler,
    listener: { listenerId: string; autoStartup: boolean },
  ): RegisteredMember {
    let member: CoordinatedMember;
    try {
      const defaults = connection.options.defaults;
      // With `batch` the handler gets arrays of messages: passed on as they come.
      member = new CoordinatedMember(connection.client, {
        // A connection the module created is the library's to reset when it hangs (half-open); an
        // application's own client is reset only when its options say so.
        resetStuckConnection: connection.owned,
        ...defaults,
        ...options,
        // Workers: the member's own runtimeMaxConcurrency or lanes before the module's (member-defaults.ts).
        runtimeMaxConcurrency: workersOf([options, defaults]),
        handler: typeof handler === 'function' ? (message: StreamMessage) => handler(message, member) : handler,
        coordinator: { ...connection.options.coordinator, ...options.coordinator },
        deadLetter: mergeDeadLetter(defaults?.deadLetter, options.deadLetter),
      } as CoordinatedMemberOptions);
    } catch (error) {
      // Same error class, with where the bad option came from: the listener or bean, or the module's defaults.
      const original = error as Error;
      const ErrorClass = original.constructor as new (message: string) => Error;
      throw new ErrorClass(`${where}: ${original.message}${fromDefaults(original.message, options, connection.options.defaults)}`);
    }
    return this.registry.register(member, where, connection, listener);
  }
}
