import { Injectable } from '@nestjs/common';
import type { CoordinatorConnection } from './coordinator-connection';

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
}
