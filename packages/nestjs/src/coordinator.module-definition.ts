import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { CoordinatorModuleOptions } from './coordinator-module-options';

export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: COORDINATOR_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<CoordinatorModuleOptions>()
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
