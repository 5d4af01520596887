-- settings: topic overrides, policies, bindings, effective values
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

SELECT malachi.create_topic('s1', 2) > 0 AS created;

-- server defaults (this instance runs with the built-in defaults)
SELECT jsonb_pretty(malachi.topic_settings('s1'));

-- alter_topic merges overrides and returns the effective settings
SELECT malachi.alter_topic('s1', '{"segment_max_bytes": 1048576, "compression": "zstd", "zstd_level": 3}')
       - 'segment_max_age' - 'spread_by' AS effective;
SELECT settings FROM malachi.topic_meta WHERE topic = 's1';
SELECT malachi.alter_topic('s1', '{"retention": "36 hours", "segment_max_age": "90 minutes"}')
       -> 'retention' AS retention;
SELECT settings FROM malachi.topic_meta WHERE topic = 's1';

-- intervals are normalized whatever the session's IntervalStyle
SET IntervalStyle = 'iso_8601';
SELECT malachi.alter_topic('s1', '{"retention": "P2D"}') ->> 'retention' AS retention;
RESET IntervalStyle;
SELECT malachi.topic_settings('s1') ->> 'retention' AS retention;

-- a null value removes an override; "unlimited" keeps data forever
SELECT malachi.alter_topic('s1', '{"zstd_level": null, "retention": "unlimited", "retention_bytes": "unlimited"}')
       -> 'zstd_level' AS level_back_to_default;
SELECT settings FROM malachi.topic_meta WHERE topic = 's1';
SELECT malachi.topic_settings('s1') -> 'retention' AS retention,
       malachi.topic_settings('s1') -> 'retention_bytes' AS retention_bytes;
SELECT malachi.alter_topic('s1', '{}') = malachi.topic_settings('s1') AS empty_changes_nothing;

-- every key and its accepted values
SELECT malachi.alter_topic('s1', '{"segment_max_bytes": 65536, "segment_max_age": "1 second",
    "retention": "1 day", "retention_bytes": 1, "compression": "none", "zstd_level": 22,
    "replication_factor": 16, "spread_by": "rack", "min_domains": 16, "placement": "hard"}');

-- policies: a definition is validated like overrides
SELECT malachi.create_policy('bronze', '{"retention": "3 days", "retention_bytes": 1073741824, "spread_by": "dc", "segment_max_bytes": 2097152}');
SELECT malachi.create_policy('silver', '{}');
SELECT policy, definition FROM malachi.policy_meta ORDER BY policy;

-- precedence: topic overrides > policy > server defaults
SELECT malachi.create_topic('s2') > 0 AS created;
SELECT malachi.bind_topic_policy('s2', 'bronze');
SELECT malachi.topic_policy_name('s2');
SELECT malachi.topic_settings('s2') ->> 'retention' AS from_policy,
       malachi.topic_settings('s2') ->> 'compression' AS from_default;
SELECT malachi.alter_topic('s2', '{"retention": "1 hour"}') ->> 'retention' AS topic_wins;
SELECT malachi.alter_topic('s2', '{"retention": null}') ->> 'retention' AS policy_again;
SELECT malachi.alter_topic('s2', '{"retention": "unlimited"}') -> 'retention' AS unlimited_beats_policy;

-- alter_policy replaces the definition, and bound topics see it at once
SELECT malachi.alter_policy('bronze', '{"compression": "zstd"}');
SELECT malachi.topic_settings('s2') ->> 'compression' AS compression,
       malachi.topic_settings('s2') ->> 'spread_by' AS spread_by_gone,
       malachi.topic_settings('s2') ->> 'segment_max_bytes' AS segment_max_bytes;
SELECT definition FROM malachi.policy_meta WHERE policy = 'bronze';

-- rebinding, listing, detaching
SELECT malachi.bind_topic_policy('s1', 'bronze');
SELECT malachi.topics_bound_to('bronze');
SELECT malachi.bind_topic_policy('s1', 'silver');
SELECT malachi.topics_bound_to('bronze'), malachi.topics_bound_to('silver');
SELECT malachi.drop_policy('bronze');
SELECT malachi.bind_topic_policy('s2', NULL);
SELECT malachi.topic_policy_name('s2') IS NULL AS detached;
SELECT malachi.bind_topic_policy('s2', NULL);
SELECT malachi.drop_policy('bronze');
SELECT count(*) AS policies FROM malachi.policy_meta;

-- invalid settings change nothing
SELECT settings AS before FROM malachi.topic_meta WHERE topic = 's2' \gset
SELECT malachi.alter_topic('s2', '{"segment_max_bytes": 1024, "compression": "zstd"}');
SELECT malachi.alter_topic('s2', '{"no_such_key": 1}');
SELECT malachi.alter_topic('s2', '{"segment_max_bytes": "big"}');
SELECT malachi.alter_topic('s2', '{"segment_max_bytes": 1.5}');
SELECT malachi.alter_topic('s2', '{"segment_max_bytes": 99999999999999999999999}');
SELECT malachi.alter_topic('s2', '{"segment_max_bytes": 2147483648}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "soon"}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "-1 hour"}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "0"}');
-- longer than an int64 of microseconds: refused, not wrapped around
SELECT malachi.alter_topic('s2', '{"retention": "7116800 mons"}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "300000 years"}');
SELECT malachi.alter_topic('s2', '{"retention": "200000000 days"}');
BEGIN;
SELECT malachi.alter_topic('s2', '{"retention": "290000 years"}') ->> 'retention' AS longest;
ROLLBACK;
SELECT malachi.alter_topic('s2', '{"segment_max_age": 60}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "unlimited"}');
SELECT malachi.alter_topic('s2', '{"retention": true}');
SELECT malachi.alter_topic('s2', '{"retention_bytes": 0}');
SELECT malachi.alter_topic('s2', '{"compression": "gzip"}');
SELECT malachi.alter_topic('s2', '{"zstd_level": 0}');
SELECT malachi.alter_topic('s2', '{"zstd_level": 23}');
SELECT malachi.alter_topic('s2', '{"replication_factor": 0}');
SELECT malachi.alter_topic('s2', '{"spread_by": ""}');
SELECT malachi.alter_topic('s2', '{"spread_by": 7}');
SELECT malachi.alter_topic('s2', '{"min_domains": 0}');
SELECT malachi.alter_topic('s2', '{"placement": "anywhere"}');
SELECT malachi.alter_topic('s2', '{"retention": "2147483647 days 100000 hours"}');
SELECT malachi.alter_topic('s2', '{"segment_max_age": "-2147483648 days -100000 hours"}');
SELECT malachi.alter_topic('s2', '[1, 2]');
SELECT malachi.alter_topic('s2', '"retention"');
SELECT malachi.alter_topic('s2', NULL);
SELECT malachi.alter_topic(NULL, '{}');
SELECT malachi.alter_topic('nope', '{}');
SELECT settings = :'before' AS unchanged FROM malachi.topic_meta WHERE topic = 's2';

-- policy errors
SELECT malachi.create_policy('silver', '{}');
SELECT malachi.create_policy('p', '{"retention": "forever"}');
SELECT malachi.create_policy('p', NULL);
SELECT malachi.create_policy(NULL, '{}');
SELECT malachi.create_policy('', '{}');
SELECT malachi.alter_policy('nope', '{}');
SELECT malachi.alter_policy('silver', '{"zstd_level": "high"}');
SELECT malachi.drop_policy('nope');
SELECT malachi.drop_policy(NULL);
SELECT malachi.bind_topic_policy('s1', 'nope');
SELECT malachi.bind_topic_policy('nope', 'silver');
SELECT malachi.bind_topic_policy(NULL, 'silver');
SELECT malachi.topics_bound_to('nope');
SELECT malachi.topics_bound_to(NULL);
SELECT count(*) AS no_policy_p FROM malachi.policy_meta WHERE policy = 'p';

-- a row written by hand is checked as alter_topic and alter_policy check:
-- nothing a topic or policy cannot hold is ever stored
\set VERBOSITY sqlstate
UPDATE malachi.topic_meta SET settings = '{"retention": "forever"}' WHERE topic = 's2';
UPDATE malachi.topic_meta SET settings = '{"colour": "blue"}' WHERE topic = 's2';
UPDATE malachi.topic_meta SET settings = '[]' WHERE topic = 's2';
UPDATE malachi.policy_meta SET definition = '{"zstd_level": "high"}' WHERE policy = 'silver';
INSERT INTO malachi.policy_meta (policy, definition) VALUES ('hand', '{"placement": "anywhere"}');
\set VERBOSITY default
UPDATE malachi.topic_meta SET settings = '{"segment_max_age": 7}' WHERE topic = 's2';
SELECT settings = :'before' AS unchanged FROM malachi.topic_meta WHERE topic = 's2';
UPDATE malachi.topic_meta SET settings = '{"retention": "1 day"}' WHERE topic = 's2';
SELECT malachi.topic_settings('s2') ->> 'retention' AS retention;

-- a policy bound to several topics lists them all in the error, sorted
SELECT malachi.bind_topic_policy('s2', 'silver');
SELECT malachi.drop_policy('silver');
SELECT malachi.topics_bound_to('silver');

-- malachi.fsync is set for the whole server, at start: a session or a
-- reload that turned it off in some backends would let them mark the
-- others' appends durable unsynced
SET malachi.fsync = off;
SHOW malachi.fsync;

-- clean up
SELECT malachi.drop_topic('s1'), malachi.drop_topic('s2');
SELECT malachi.drop_policy('silver');
