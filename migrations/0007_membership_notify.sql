-- Membership changes announced to every server instance.
--
-- Each instance keeps course memberships in memory and ends the subscriptions of people who lose
-- access. Both rely on hearing of every change, whoever makes it: the roster API, a roster
-- import, or another system (an LMS sync job) writing course_members directly. So the table
-- announces its own changes: after every row written or deleted, a NOTIFY on
-- `course_members_changed` with `<user_id>:<course_id>`; after a TRUNCATE, `*` (everything may
-- have changed). PostgreSQL delivers a notification only when its transaction commits, and
-- drops duplicates within one transaction, so a bulk change costs one message per distinct row.

CREATE FUNCTION course_members_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('course_members_changed', '*');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('course_members_changed', OLD.user_id || ':' || OLD.course_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify('course_members_changed', NEW.user_id || ':' || NEW.course_id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER course_members_notify_rows
    AFTER INSERT OR UPDATE OR DELETE ON course_members
    FOR EACH ROW EXECUTE FUNCTION course_members_notify();

CREATE TRIGGER course_members_notify_truncate
    AFTER TRUNCATE ON course_members
    FOR EACH STATEMENT EXECUTE FUNCTION course_members_notify();
