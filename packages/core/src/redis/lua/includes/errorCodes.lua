-- Protocol outcome codes, mirrored from protocol/error-codes.ts (a test keeps the two equal).
local ERR_NONE = 0
local ERR_UNKNOWN_MEMBER_ID = 1
local ERR_FENCED_MEMBER_EPOCH = 2
local ERR_INVALID_REQUEST = 3
local ERR_GROUP_NOT_FOUND = 4
local ERR_STALE_GROUP_EPOCH = 5
local ERR_INVALID_ASSIGNMENT = 6
local ERR_SHARD_COUNT_CONFLICT = 7
local ERR_RESIZE_IN_PROGRESS = 8
local ERR_FENCED_INSTANCE_ID = 9
local ERR_DEADLINE_EXCEEDED = 10
local ERR_NO_TIMELY_ANSWER = 11
