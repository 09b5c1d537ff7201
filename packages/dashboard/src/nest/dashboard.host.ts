import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { CoordinatorConnections, CoordinatorRegistry, StreamListenerRegistry } from '@redis-stream-coordinator/nestjs';
import { Dashboard } from '../dashboard';
import type { DashboardListeners } from '../dashboard-options';
import type { CoordinatorDashboardModuleOptions } from './dashboard-module-options';
import { COORDINATOR_DASHBOARD_OPTIONS } from './dashboard.module-definition';

/**
 * Mounts the dashboard on the application's HTTP server when the module initialises (after the
 * CoordinatorModule connections exist), and ends its live streams before the application shuts
 * down, so that closing the HTTP server is not held up by open pages.
 */
@Injectable()
export class CoordinatorDashboardHost implements OnModuleInit, BeforeApplicationShutdown {
  private readonly logger = new Logger('CoordinatorDashboard');
  private current: Dashboard | undefined;

  constructor(
    @Inject(COORDINATOR_DASHBOARD_OPTIONS) private readonly options: CoordinatorDashboardModuleOptions,
    private readonly adapterHost: HttpAdapterHost,
    private readonly connections: CoordinatorConnections,
    private readonly registry: CoordinatorRegistry,
    private readonly listeners: StreamListenerRegistry,
  ) {}

  /** The dashboard (for its stats() and events); undefined before the module has initialised. */
  get dashboard(): Dashboard | undefined {
    return this.current;
  }

  onModuleInit(): void {
    const { connection: name, ...options } = this.options ?? {};
    const connection = this.connections.resolve(name, 'CoordinatorDashboardModule');
    const dashboard = new Dashboard({
      ...options,
      redis: connection.client,
      coordinator: connection.options.coordinator,
      listeners: nestListeners(this.listeners),
      members: () => this.registry.members(),
    });
    dashboard.on('error', (error) => this.logger.warn(error.message));
    dashboard.on('action', (action) => this.logger.log(`${action.action}: ${action.target}`));
    const adapter = this.adapterHost.httpAdapter;
    if (!adapter)
      throw new Error('CoordinatorDashboardModule: the application has no HTTP server (an HTTP adapter is needed to serve the page)');
    adapter.use(dashboard.middleware());
    this.current = dashboard;
    this.logger.log(`dashboard at ${dashboard.options.path}/ (${dashboard.options.readOnly ? 'read-only' : 'actions on'})`);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.current?.close();
  }
}

/** The StreamListenerRegistry as the dashboard sees it. */
function nestListeners(registry: StreamListenerRegistry): DashboardListeners {
  return {
    list: () =>
      registry.getAll().map((container) => {
        const first = container.members()[0];
        return {
          id: container.id,
          kind: container.kind,
          streamPrefix: first?.options.streamPrefix,
          consumerGroup: first?.options.consumerGroup,
          running: container.isRunning(),
          paused: container.isPaused(),
          concurrency: container.concurrency,
        };
      }),
    pause: (id) => registry.getOrThrow(id).pause(),
    resume: (id) => registry.getOrThrow(id).resume(),
  };
}
