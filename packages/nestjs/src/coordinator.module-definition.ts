import { ConfigurableModuleBuilder } from '@nestjs/common';
import { COORDINATOR_MODULE_OPTIONS } from './coordinator.constants';
import { withConnectionProviders } from './coordinator-connection.providers';
import type { CoordinatorModuleExtras, CoordinatorModuleOptions } from './coordinator-module-options';

export { COORDINATOR_MODULE_OPTIONS };

export const { ConfigurableModuleClass, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } = new ConfigurableModuleBuilder<CoordinatorModuleOptions>({
  optionsInjectionToken: COORDINATOR_MODULE_OPTIONS,
})
  .setClassMethodName('forRoot')
  // `name` is an extra, not a module option: forRootAsync must know it before its factory runs,
  // because the module's provider tokens depend on it.
  .setExtras<CoordinatorModuleExtras>({ isGlobal: true, name: undefined }, withConnectionProviders)
  .build();
