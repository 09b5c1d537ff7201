import { defineEdgeTier } from './edge-tier';

/** The edge tier's quick cases (seconds each), in `npm test`; the slow ones: `npm run test:edge` (docs/reliability.md, The edge tier). */
defineEdgeTier('quick');
