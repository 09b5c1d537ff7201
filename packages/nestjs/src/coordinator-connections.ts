import { Injectable } from '@nestjs/common';
import type { CoordinatorConnection } from './coordinator-connection';
import { connectionName } from './coordinator.tokens';

/**
 * Every `CoordinatorModule.forRoot` of the application, by name. Each module adds its connection
 * when Nest creates it, before any module-init hook runs, so the explorer sees them all.
 */
@Injectable()
export class CoordinatorConnections {
  private readonly byName = new Map<string, CoordinatorConnection>();

  add(connection: CoordinatorConnection): void {
    if (this.byName.has(connection.name)) {
      throw new Error(
        `CoordinatorModule: two CoordinatorModule.forRoot imports use the connection name "${connection.name}": ` +
          'give each one its own name (forRoot({ name: "audit", ... })) and pick it with the connection option of @StreamListener or CoordinatorConsumerProperties',
      );
    }
    this.byName.set(connection.name, connection);
  }

  get(name: string): CoordinatorConnection | undefined {
    return this.byName.get(name);
  }

  all(): CoordinatorConnection[] {
    return [...this.byName.values()];
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  /** The connection a listener or consumer names (`where` it is, for the error): a name no `forRoot` has is an error. */
  resolve(name: string | undefined, where: string): CoordinatorConnection {
    if (name !== undefined && (typeof name !== 'string' || name === '')) {
      throw new TypeError(`${where}: connection must be a non-empty string, got ${JSON.stringify(name)}`);
    }
    const connection = this.get(connectionName(name));
    if (connection) return connection;
    const known = this.names()
      .map((n) => `"${n}"`)
      .join(', ');
    throw new Error(
      name === undefined
        ? `${where}: it names no connection and there is no unnamed CoordinatorModule.forRoot (connections: ${known}): give it connection: "<name>"`
        : `${where}: connection "${name}" is not the name of any CoordinatorModule.forRoot (connections: ${known})`,
    );
  }
}
