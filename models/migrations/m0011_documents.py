"""Documents the platform keeps in Vigil (seed 001's dynadata documents), versioned; and each monitor's
watch key, so a document's write finds the monitors watching it with one indexed query."""

import peewee


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class User(Base):
        class Meta:
            table_name = "users"

    class Document(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        item_type = peewee.CharField(max_length=70)
        item_id = peewee.CharField(max_length=200)
        version = peewee.IntegerField(default=1)
        body = peewee.TextField()
        created_at = peewee.DateTimeField()
        updated_at = peewee.DateTimeField()

        class Meta:
            table_name = "documents"
            indexes = ((("user", "item_type", "item_id"), True),)

    db.create_tables([Document])
    db.execute_sql("ALTER TABLE monitors ADD COLUMN watch_key VARCHAR(300)")
    db.execute_sql("CREATE INDEX monitor_watch_key ON monitors (watch_key)")
