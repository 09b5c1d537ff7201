import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { CoordinatedMember, type CoordinatedMemberOptions, type StreamMessage } from '@redis-stream-coordinator/core';
import { v7 as uuidv7 } from 'uuid';
import { COORDINATOR_CONNECTION } from './coordinator.constants';
import { COORDINATOR_MODULE_OPTIONS } from './coordinator.module-definition';
import { CoordinatorRegistry } from './coordinator.registry';
import type { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorConsumerProperties } from './coordinator-consumer-properties';
import { CoordinatorMetadataAccessor } from './coordinator-metadata.accessor';
import type { CoordinatorModuleOptions } from './coordinator-module-options';
import type { StreamListenerOptions } from './stream-listener.decorator';

const MAX_LISTENER_CONCURRENCY = 1024;

/**
 * Finds the members of the application at module init: every @StreamListener method (N logical
 * members for `concurrency: N`), every provider whose value is a CoordinatorConsumerProperties, and
 * every entry of the module's `consumers` (one member each). A misconfigured one is a startup error
 * that names the class, the method and the option.
 */
@Injectable()
export class CoordinatorExplorer implements OnModuleInit {
  private readonly logger = new Logger('CoordinatorModule');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly metadata: CoordinatorMetadataAccessor,
    private readonly registry: CoordinatorRegistry,
    @Inject(COORDINATOR_CONNECTION) private readonly connection: CoordinatorConnection,
    @Inject(COORDINATOR_MODULE_OPTIONS) private readonly options: CoordinatorModuleOptions,
  ) {}

  onModuleInit(): void {
    const groups = new Map<string, string>();
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.instance instanceof CoordinatorConsumerProperties) {
        this.addBean(wrapper.instance as CoordinatorConsumerProperties<never>, `bean ${String(wrapper.token?.toString?.() ?? wrapper.name)}`);
        continue;
      }
      this.addListeners(wrapper, groups);
    }
    (this.options.consumers ?? []).forEach((properties, i) => {
      if (!(properties instanceof CoordinatorConsumerProperties)) {
        throw new TypeError(`CoordinatorModule: consumers[${i}] must be built with CoordinatorConsumerProperties.consumer(...)`);
      }
      this.addBean(properties, `consumers[${i}]`);
    });
  }

  private addListeners(wrapper: InstanceWrapper, groups: Map<string, string>): void {
    const { instance } = wrapper;
    if (!instance || typeof instance !== 'object') return;
    const prototype = Object.getPrototypeOf(instance) as object;
    for (const method of this.scanner.getAllMethodNames(prototype)) {
      const listener = this.metadata.streamListener((instance as Record<string, (...args: unknown[]) => unknown>)[method]);
      if (!listener) continue;
      const where = `${instance.constructor.name}.${method}`;
      if (!wrapper.isDependencyTreeStatic()) {
        this.logger.warn(`@StreamListener on ${where} is skipped: its provider is request-scoped, and a member lives as long as the application`);
        continue;
      }
      const groupKey = `${listener.streamPrefix}/${listener.consumerGroup}`;
      const earlier = groups.get(groupKey);
      if (earlier) {
        this.logger.warn(`@StreamListener on ${where} and on ${earlier} join the same group ${groupKey}: its shards are split between two different handlers`);
      }
      groups.set(groupKey, where);
      this.addListener(listener, (message) => (instance as Record<string, (m: StreamMessage) => unknown>)[method](message), where);
    }
  }

  private addListener(listener: StreamListenerOptions, handler: (message: StreamMessage) => unknown, where: string): void {
    const { concurrency = 1, ...options } = listener;
    if (typeof concurrency !== 'number' || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_LISTENER_CONCURRENCY) {
      throw new RangeError(`@StreamListener on ${where}: concurrency must be an integer from 1 to ${MAX_LISTENER_CONCURRENCY}, got ${JSON.stringify(concurrency)}`);
    }
    const baseId = uuidv7();
    const baseName = options.memberName ?? where;
    for (let i = 0; i < concurrency; i++) {
      this.add(
        { ...options, memberId: `${baseId}-m${i}`, memberName: `${baseName}-m${i}`, runtimeMaxConcurrency: options.runtimeMaxConcurrency ?? 1, handler },
        `@StreamListener on ${where}`,
      );
    }
  }

  private addBean(properties: CoordinatorConsumerProperties<never>, where: string): void {
    this.add(properties.options as CoordinatedMemberOptions, where);
  }

  private add(options: CoordinatedMemberOptions, where: string): void {
    let member: CoordinatedMember;
    try {
      member = new CoordinatedMember(this.connection.client, {
        ...this.options.defaults,
        ...options,
        coordinator: { ...this.options.coordinator, ...options.coordinator },
      });
    } catch (error) {
      // Same error class, with where the bad option came from in front of the message.
      const original = error as Error;
      const ErrorClass = original.constructor as new (message: string) => Error;
      throw new ErrorClass(`${where}: ${original.message}`);
    }
    this.registry.register(member, where);
  }
}
