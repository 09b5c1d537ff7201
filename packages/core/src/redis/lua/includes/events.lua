-- The capped event stream of coordinator decisions, for debugging and dashboards.
local function appendEvent(K, cfg, g, eventType, memberId, detail)
  redis.call('XADD', K.events, 'MAXLEN', '~', cfg.eventLogMaxLen, '*',
    'type', eventType, 'memberId', memberId or '', 'groupEpoch', g.groupEpoch,
    'assignmentEpoch', g.assignmentEpoch, 'detail', detail or '')
end
