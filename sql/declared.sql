-- Declared lists: versions, manifests, adoption, clear, park.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

SELECT malachi.create_topic('orders');
-- in public by name: the schema "$user" finds first depends on who runs the tests
CREATE TABLE public.handled (n int);
CREATE FUNCTION public.handle(batch malachi.record[]) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO public.handled VALUES (cardinality(batch)) $$;
CREATE FUNCTION public.wrong_signature(batch text[]) RETURNS void
	LANGUAGE sql AS $$ SELECT $$;
-- wait (up to 10 s) for the supervisor to make a condition true
CREATE FUNCTION wait_until(cond text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	ok boolean;
BEGIN
	FOR i IN 1 .. 500 LOOP
		EXECUTE 'SELECT ' || cond INTO ok;
		EXIT WHEN ok;
		PERFORM pg_sleep(0.02);
	END LOOP;
END
$$;

-- a mutation that changes the list bumps the version by one; one that
-- changes nothing returns it unchanged
SELECT malachi.declare_child('hub', 'billing',
	'{"kind": "consumer", "topic": "orders", "group": "billing", "function": "handle"}');
SELECT malachi.declare_child('hub', 'billing',
	'{"kind": "consumer", "topic": "orders", "group": "billing", "function": "handle"}');
-- one transaction: the supervisor sees only the last spec, so it never
-- starts (and restarts) the first
BEGIN;
SELECT malachi.declare_child('hub', 'audit',
	'{"kind": "consumer", "topic": "orders", "group": "audit", "function": "handle", "batch": 10, "wait": "100ms"}',
	'{"team": "audit"}');
SELECT malachi.declare_child('hub', 'audit',
	'{"kind": "consumer", "topic": "orders", "group": "audit", "function": "handle", "batch": 10, "wait": "100ms"}',
	'{"team": "audit"}');
SELECT malachi.declare_child('hub', 'audit',
	'{"kind": "consumer", "topic": "orders", "group": "audit", "function": "handle", "batch": 20, "wait": "100ms"}',
	'{"team": "audit"}');
COMMIT;
SELECT malachi.undeclare_child('hub', 'nobody');
SELECT malachi.undeclare_child('nohub', 'nobody');
SELECT * FROM malachi.declared_children('hub');
SELECT malachi.declared_child('hub', 'audit');
SELECT malachi.declared_child('hub', 'nobody');
SELECT * FROM malachi.declared_children('nohub');
-- a rolled back declaration leaves no trace
BEGIN;
SELECT malachi.declare_child('hub', 'temp',
	'{"kind": "consumer", "topic": "orders", "group": "temp", "function": "handle"}');
ROLLBACK;
SELECT version FROM malachi.declared_children('hub');

-- manifest round trip: export, adopt elsewhere, identical
SELECT malachi.declared_manifest('hub') - 'entries' AS header;
SELECT jsonb_array_length(malachi.declared_manifest('hub') -> 'entries') AS entries;
SELECT malachi.adopt_manifest('copy', malachi.declared_manifest('hub'));
SELECT (malachi.declared_manifest('copy') - 'mutated_by') = (malachi.declared_manifest('hub') - 'mutated_by') AS same;
SELECT malachi.adopt_manifest('copy', malachi.declared_manifest('hub'));	-- identical: kept

-- adopt a higher version: replaced wholesale; a lower one: kept
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 10,
	'mutated_by', 'node-b', 'entries', jsonb_build_array(jsonb_build_object('child_id', 'only',
		'spec', jsonb_build_object('kind', 'consumer', 'topic', 'orders', 'group', 'g', 'function', 'public.handle')))));
SELECT version, jsonb_path_query_array(children, '$[*].child_id') FROM malachi.declared_children('copy');
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 9,
	'mutated_by', 'node-a', 'entries', '[]'::jsonb));
SELECT version, jsonb_path_query_array(children, '$[*].child_id') FROM malachi.declared_children('copy');
-- an equal version with other content: the lowest mutated_by wins, with a warning
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 10,
	'mutated_by', 'node-c', 'entries', '[]'::jsonb));
SELECT version, jsonb_path_query_array(children, '$[*].child_id') FROM malachi.declared_children('copy');
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 10,
	'mutated_by', 'node-a', 'entries', '[]'::jsonb));
SELECT version, children, malachi.declared_manifest('copy') ->> 'mutated_by' AS mutated_by
  FROM malachi.declared_children('copy');

-- malformed manifests are refused and change nothing
SELECT malachi.adopt_manifest('copy', '[]');
SELECT malachi.adopt_manifest('copy', '{"format": 2, "version": 11, "mutated_by": "x", "entries": []}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": -1, "mutated_by": "x", "entries": []}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 1.5, "mutated_by": "x", "entries": []}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 11, "entries": []}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 11, "mutated_by": "x"}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 11, "mutated_by": "x", "entries": [], "extra": 1}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 11, "mutated_by": "x", "entries": [1]}');
SELECT malachi.adopt_manifest('copy', '{"format": 1, "version": 11, "mutated_by": "x", "entries": [{"spec": {}}]}');
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 11, 'mutated_by', 'x',
	'entries', jsonb_build_array(jsonb_build_object('child_id', 'a', 'spec', jsonb_build_object('kind', 'cron')))));
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 11, 'mutated_by', 'x',
	'entries', jsonb_build_array(
		jsonb_build_object('child_id', 'a', 'spec', jsonb_build_object('kind', 'consumer', 'topic', 'orders', 'group', 'g', 'function', 'public.handle')),
		jsonb_build_object('child_id', 'a', 'spec', jsonb_build_object('kind', 'consumer', 'topic', 'orders', 'group', 'g', 'function', 'public.handle')))));
-- a manifest names each function with its schema, as declare_child stores it
SELECT malachi.adopt_manifest('copy', jsonb_build_object('format', 1, 'version', 11, 'mutated_by', 'x',
	'entries', jsonb_build_array(jsonb_build_object('child_id', 'a', 'spec', jsonb_build_object('kind', 'consumer', 'topic', 'orders', 'group', 'g', 'function', 'handle')))));
SELECT malachi.adopt_manifest('copy', NULL);
SELECT version FROM malachi.declared_children('copy');

-- bad child specs and arguments
SELECT malachi.declare_child('hub', 'x', '{"kind": "cron"}');
SELECT malachi.declare_child('hub', 'x', '{"topic": "orders"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "group": "g", "function": "handle"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "function": "handle"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "colour": "red"}');
-- a key is known only by its whole name (not "t" for "topic", nor "")
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "t": 1}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "": 1}');
-- the supervisor keeps a spec's text in shared memory: at most 2047 bytes
SELECT malachi.declare_child('hub', 'x', jsonb_build_object('kind', 'consumer', 'topic', 'orders',
	'group', 'g', 'function', 'handle', 'wait', '1' || repeat(' ', 3000) || 's'));
-- one that fits until its function is stored with its schema: the context
-- says how it is stored
SELECT malachi.declare_child('hub', 'x', jsonb_build_object('kind', 'consumer', 'topic', 'orders',
	'group', 'g', 'function', 'handle', 'wait', '1' || repeat(' ', 2045 - length(s::text)) || 's'))
  FROM (SELECT jsonb_build_object('kind', 'consumer', 'topic', 'orders', 'group', 'g',
	'function', 'handle', 'wait', '1s') s) q;
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "batch": 0}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "batch": "ten"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "wait": "soon"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle", "wait": "2 hours"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "nope"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "wrong_signature"}');
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "nope", "group": "g", "function": "handle"}');
-- a temporary function would not exist in the child's session
CREATE FUNCTION pg_temp.temp_handle(batch malachi.record[]) RETURNS void LANGUAGE sql AS $$ SELECT $$;
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "pg_temp.temp_handle"}');
SELECT malachi.declare_child('hub', 'x', '[]');
SELECT malachi.declare_child('hub', 'x', NULL);
SELECT malachi.declare_child('hub', 'x', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle"}', NULL);
SELECT malachi.declare_child(NULL, 'x', '{}');
SELECT malachi.declare_child('', 'x', '{}');
-- a hub name is at most 120 bytes (its manifest copy's file name holds it in hex)
SELECT malachi.declare_child(repeat('h', 121), 'x', '{}');
SELECT malachi.declared_children(repeat('h', 121));
SELECT malachi.declare_child('hub', NULL, '{}');
SELECT version FROM malachi.declared_children('hub');
-- adopting an empty version-0 list for a hub that has none keeps it, and
-- leaves no row behind (a row would stop a restore from the manifest copy)
SELECT malachi.adopt_manifest('v0', jsonb_build_object('format', 1, 'version', 0,
	'mutated_by', 'node-a', 'entries', '[]'::jsonb));
SELECT count(*) FROM malachi.declared_hubs WHERE hub = 'v0';
-- a change of a declared list cannot be prepared: COMMIT PREPARED, in
-- another session, would not wake the supervisor
BEGIN;
SELECT malachi.declare_child('hub', 'prepared', '{"kind": "consumer", "topic": "orders", "group": "g", "function": "handle"}') > 0 AS declared;
PREPARE TRANSACTION 'malachi_declared';
SELECT malachi.declared_child('hub', 'prepared');
SELECT version FROM malachi.declared_children('hub');

-- an unqualified function is resolved under the declarer's search_path and
-- stored with its schema: the child, which looks the name up as its owner
-- under the database's default path, runs the function that was checked
CREATE SCHEMA app;
CREATE FUNCTION app.app_handle(batch malachi.record[]) RETURNS void LANGUAGE sql AS $$ SELECT $$;
SET search_path = app, public;
SELECT malachi.declare_child('qualified', 'q', '{"kind": "consumer", "topic": "orders", "group": "q", "function": "app_handle"}');
SELECT malachi.declare_child('qualified', 'q', '{"kind": "consumer", "topic": "orders", "group": "q", "function": "app_handle"}');
RESET search_path;
SELECT malachi.declared_child('qualified', 'q') -> 'spec' ->> 'function' AS function;
SELECT malachi.undeclare_child('qualified', 'q');

-- the supervisor runs the declared children
SELECT wait_until($c$(SELECT count(*) FROM malachi.children WHERE hub = 'hub' AND state = 'running' AND pid IS NOT NULL) = 2$c$);
SELECT hub, child_id, node, pid IS NOT NULL AS has_pid, state, restarts, last_error
  FROM malachi.children WHERE hub = 'hub' ORDER BY child_id;
SELECT malachi.declared_parked('hub');

-- a spec written by hand whose wait is no interval: the supervisor parks
-- the hub instead of starting a child that cannot run
BEGIN;
SELECT malachi.declare_child('bad', 'b1', '{"kind": "consumer", "topic": "orders", "group": "gb", "function": "handle"}');
UPDATE malachi.declared_children SET spec = spec || '{"wait": "soon"}' WHERE hub = 'bad';
COMMIT;
SELECT wait_until($c$malachi.declared_parked('bad')$c$);
SELECT malachi.declared_parked('bad');
SELECT count(*) FROM malachi.children WHERE hub = 'bad';
SELECT malachi.clear_declared('bad');
-- so is one whose function is not named with its schema (the child would
-- look it up under the database's search_path)
BEGIN;
SELECT malachi.declare_child('bad', 'b2', '{"kind": "consumer", "topic": "orders", "group": "gb", "function": "handle"}');
UPDATE malachi.declared_children SET spec = spec || '{"function": "handle"}' WHERE hub = 'bad';
COMMIT;
SELECT wait_until($c$malachi.declared_parked('bad')$c$);
SELECT malachi.declared_parked('bad');
SELECT count(*) FROM malachi.children WHERE hub = 'bad';
SELECT malachi.clear_declared('bad');

-- the hub's row deleted behind the extension's back: parked, the children stay
DELETE FROM malachi.declared_hubs WHERE hub = 'hub';
SELECT wait_until($c$malachi.declared_parked('hub')$c$);
SELECT malachi.declared_parked('hub');
SELECT child_id, state FROM malachi.children WHERE hub = 'hub' ORDER BY child_id;
-- clear_declared: empty list above every known version, park lifted
SELECT malachi.clear_declared('hub');
SELECT wait_until($c$NOT malachi.declared_parked('hub')
	   AND NOT EXISTS (SELECT FROM malachi.children WHERE hub = 'hub')$c$);
SELECT malachi.declared_parked('hub');
SELECT * FROM malachi.declared_children('hub');
SELECT count(*) FROM malachi.children WHERE hub = 'hub';
-- an older list than the evidence parks too
UPDATE malachi.declared_hubs SET version = 1 WHERE hub = 'copy';
SELECT wait_until($c$malachi.declared_parked('copy')$c$);
SELECT malachi.declared_parked('copy');
SELECT malachi.clear_declared('copy');
SELECT malachi.declared_parked('nohub');

SELECT malachi.drop_topic('orders');
DROP FUNCTION public.handle(malachi.record[]);
DROP FUNCTION public.wrong_signature(text[]);
DROP TABLE public.handled;
DROP SCHEMA app CASCADE;
DROP FUNCTION wait_until(text);
