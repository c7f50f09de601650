"""ConsumerConfig's property attributes, typed. GENERATED from the table in config.py: do not edit.

Regenerate with ``python -m zkconsumer.config_types --write`` after changing the table
(``tests/unit/core/test_config_types.py`` fails while the two disagree).

May import: the standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional


class PropertyAttributes:
    """One read-only attribute per property (its dotted name with underscores), as ConsumerConfig parses it.

    Declarations for the type checker only: at run time ``ConsumerConfig.__getattr__`` answers.
    """

    __slots__ = ()

    if TYPE_CHECKING:
        #: ``zookeeper.connect`` (default (required)): ZooKeeper connect string host:port[,host:port...][/chroot]
        @property
        def zookeeper_connect(self) -> str: ...

        #: ``group.id`` (default (required)): the consumer group this member belongs to
        @property
        def group_id(self) -> str: ...

        #: ``consumer.id`` (default (none)): fixed consumer id (the member is <group.id>_<consumer.id>); generated if
        #: unset
        @property
        def consumer_id(self) -> Optional[str]: ...

        #: ``client.id`` (default = group.id): client id sent to brokers
        @property
        def client_id(self) -> str: ...

        #: ``socket.timeout.ms`` (default 30000): socket timeout for broker requests; at least fetch.wait.max.ms
        @property
        def socket_timeout_ms(self) -> int: ...

        #: ``socket.receive.buffer.bytes`` (default 65536): socket receive buffer for broker connections
        @property
        def socket_receive_buffer_bytes(self) -> int: ...

        #: ``fetch.message.max.bytes`` (default 1048576): bytes per partition per fetch request; bounds the largest
        #: message
        @property
        def fetch_message_max_bytes(self) -> int: ...

        #: ``num.consumer.fetchers`` (default 1): fetcher threads per broker
        @property
        def num_consumer_fetchers(self) -> int: ...

        #: ``auto.commit.enable`` (default true): commit consumed offsets periodically
        @property
        def auto_commit_enable(self) -> bool: ...

        #: ``auto.commit.interval.ms`` (default 60000): how often offsets are committed when auto.commit.enable
        @property
        def auto_commit_interval_ms(self) -> int: ...

        #: ``queued.max.message.chunks`` (default 2): fetched chunks buffered per stream (each up to
        #: fetch.message.max.bytes)
        @property
        def queued_max_message_chunks(self) -> int: ...

        #: ``rebalance.max.retries`` (default 4): rebalance attempts before reporting failure
        @property
        def rebalance_max_retries(self) -> int: ...

        #: ``fetch.min.bytes`` (default 1): minimum bytes a broker returns for a fetch (it waits up to fetch.wait.max.ms)
        @property
        def fetch_min_bytes(self) -> int: ...

        #: ``fetch.wait.max.ms`` (default 100): longest a broker blocks a fetch waiting for fetch.min.bytes
        @property
        def fetch_wait_max_ms(self) -> int: ...

        #: ``rebalance.backoff.ms`` (default = zookeeper.sync.time.ms): backoff between rebalance attempts
        @property
        def rebalance_backoff_ms(self) -> int: ...

        #: ``refresh.leader.backoff.ms`` (default 200): backoff before looking for a partition's new leader
        @property
        def refresh_leader_backoff_ms(self) -> int: ...

        #: ``offsets.channel.backoff.ms`` (default 1000): backoff before retrying the offsets channel
        #: (offsets.storage=kafka)
        @property
        def offsets_channel_backoff_ms(self) -> int: ...

        #: ``offsets.channel.socket.timeout.ms`` (default 10000): socket timeout of offset fetch/commit requests
        #: (offsets.storage=kafka)
        @property
        def offsets_channel_socket_timeout_ms(self) -> int: ...

        #: ``offsets.commit.max.retries`` (default 5): retries of the offset commit at shutdown
        @property
        def offsets_commit_max_retries(self) -> int: ...

        #: ``offsets.storage`` (default zookeeper): where offsets are committed: zookeeper or kafka
        @property
        def offsets_storage(self) -> Literal['zookeeper', 'kafka']: ...

        #: ``dual.commit.enabled`` (default true if offsets.storage=kafka, else false): also commit to ZooKeeper when
        #: offsets.storage=kafka (migration)
        @property
        def dual_commit_enabled(self) -> bool: ...

        #: ``auto.offset.reset`` (default largest): where to start without a valid committed offset: smallest or largest
        @property
        def auto_offset_reset(self) -> Literal['smallest', 'largest']: ...

        #: ``consumer.timeout.ms`` (default -1): raise ConsumerTimeoutError after this long without a message; negative
        #: blocks forever
        @property
        def consumer_timeout_ms(self) -> int: ...

        #: ``exclude.internal.topics`` (default true): never consume internal topics (__consumer_offsets) through
        #: wildcards
        @property
        def exclude_internal_topics(self) -> bool: ...

        #: ``partition.assignment.strategy`` (default range): partition assignment: exactly range or roundrobin
        @property
        def partition_assignment_strategy(self) -> Literal['range', 'roundrobin']: ...

        #: ``zookeeper.session.timeout.ms`` (default 6000): ZooKeeper session timeout
        @property
        def zookeeper_session_timeout_ms(self) -> int: ...

        #: ``zookeeper.connection.timeout.ms`` (default = zookeeper.session.timeout.ms): longest wait to connect to
        #: ZooKeeper
        @property
        def zookeeper_connection_timeout_ms(self) -> int: ...

        #: ``zookeeper.sync.time.ms`` (default 2000): how far a ZooKeeper follower may lag its leader
        @property
        def zookeeper_sync_time_ms(self) -> int: ...

        #: ``zookeeper.auth`` (default (none)): ZooKeeper digest credential "user:password"
        @property
        def zookeeper_auth(self) -> Optional[str]: ...

        #: ``zookeeper.acl.enable`` (default false): create znodes readable by all but writable only by zookeeper.auth's
        #: user
        @property
        def zookeeper_acl_enable(self) -> bool: ...

        #: ``security.protocol`` (default PLAINTEXT): broker connections: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
        @property
        def security_protocol(self) -> Literal['PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL']: ...

        #: ``sasl.kerberos.service.name`` (default kafka): first part of the brokers' Kerberos principal
        @property
        def sasl_kerberos_service_name(self) -> str: ...

        #: ``sasl.kerberos.keytab`` (default (none)): keytab to log in from (else the ticket cache, KRB5CCNAME)
        @property
        def sasl_kerberos_keytab(self) -> Optional[str]: ...

        #: ``sasl.kerberos.principal`` (default (none)): principal to log in as (required with the keytab)
        @property
        def sasl_kerberos_principal(self) -> Optional[str]: ...

        #: ``zookeeper.sasl.enabled`` (default false): authenticate the ZooKeeper session with SASL/GSSAPI
        @property
        def zookeeper_sasl_enabled(self) -> bool: ...

        #: ``zookeeper.sasl.service.name`` (default zookeeper): first part of ZooKeeper's principal
        @property
        def zookeeper_sasl_service_name(self) -> str: ...

        #: ``ssl.cafile`` (default (none)): CA bundle (PEM) to verify brokers; system CAs if unset
        @property
        def ssl_cafile(self) -> Optional[str]: ...

        #: ``ssl.certfile`` (default (none)): client certificate (PEM) for SSL client authentication
        @property
        def ssl_certfile(self) -> Optional[str]: ...

        #: ``ssl.keyfile`` (default (none)): private key (PEM) of ssl.certfile, if not inside it
        @property
        def ssl_keyfile(self) -> Optional[str]: ...

        #: ``ssl.check.hostname`` (default true): verify the broker's certificate matches its host name
        @property
        def ssl_check_hostname(self) -> bool: ...

        #: ``zookeeper.heartbeat`` (default kafka): how an idle member keeps its ZooKeeper session alive: kafka = the
        #: margins of Kafka's own client (a ping after a third of the negotiated session timeout without traffic; a
        #: server dropped only after two thirds of it without a byte), sent by a thread that needs no GIL where the C
        #: extension is built (Linux), else by kazoo; quiet = opt-in, a ping after 0.7 of it and a server dropped after a
        #: sixth without an answer, at the cost of those margins: a process freeze or server pause longer than ~0.27 of
        #: the session timeout can expire the session (a member's session lease syncs every 0.27 of it in either mode, so
        #: quiet no longer halves a member's idle packets)
        @property
        def zookeeper_heartbeat(self) -> Literal['kafka', 'quiet']: ...

        #: ``fetcher.connections`` (default 3): the most connections per fetcher (num.consumer.fetchers), shared among
        #: the brokers it reads from (at least one each: 3 on one broker, 2 each on two, 1 each on three or more), each
        #: on its own thread with a disjoint share of the partitions, so one response is decoded while the broker serves
        #: another fetch. Used only while they pay: a fetcher fetches over one connection per broker until a response
        #: carries, for some partition, at least half of fetch.message.max.bytes (a backlog the fetch size cut); it then
        #: spreads its partitions on that broker over its connections, and gathers them back onto one after 5 s without
        #: such a response (an idle or live-stream member sends one long-poll per broker, as Kafka's consumer does); 1 is
        #: Kafka's one connection per fetcher and broker at every rate
        @property
        def fetcher_connections(self) -> int: ...

        #: ``fetch.on.consumer.thread`` (default true): whether a stream's consumer that finds its queue empty sends the
        #: fetch and decodes the response itself, on its own thread, while one fetcher connection serves that stream
        #: alone and its responses are small: one thread woken per response instead of two (at a few thousand messages a
        #: second every message is a response of its own). The fetcher thread fetches ahead as before once the consumer
        #: has not waited for 50 ms (the application is busy with what it got), while responses are large (a backlog) or
        #: spread over several connections; a consumer's fetch, its wait on the socket included, ends at most 50 ms after
        #: its consumer.timeout.ms whatever the broker does (a broker that does not answer for socket.timeout.ms over
        #: such fetches fails as it would on the fetcher thread). false: only fetcher threads fetch
        @property
        def fetch_on_consumer_thread(self) -> bool: ...

        #: ``offsets.commit.timeout.ms`` (default 60000): how long commit_offsets() (and each auto-commit) keeps retrying
        #: while ZooKeeper or the offsets coordinator is unavailable before raising a retriable error; 0 tries once
        @property
        def offsets_commit_timeout_ms(self) -> int: ...

        #: ``commit.processed.only`` (default false): commits (commit_offsets(), auto-commit, before a rebalance releases
        #: a partition, at shutdown) advance each partition only over messages acked processed (stream.ack(message)): to
        #: its first message handed out and not acked; workers may ack out of order
        @property
        def commit_processed_only(self) -> bool: ...

        #: ``group.membership`` (default zookeeper): who keeps the group's members and assignment: zookeeper (Kafka 0.8)
        #: or kafka (the brokers' group coordinator, as Kafka 0.9; needs offsets.storage=kafka)
        @property
        def group_membership(self) -> Literal['zookeeper', 'kafka']: ...

        #: ``session.timeout.ms`` (default = zookeeper.session.timeout.ms): group.membership=kafka: a member not heard
        #: from for this long is removed; within the brokers' group.min.session.timeout.ms..group.max.session.timeout.ms
        #: (6000..30000 by default)
        @property
        def session_timeout_ms(self) -> int: ...

        #: ``heartbeat.interval.ms`` (default session.timeout.ms / 3): group.membership=kafka: time between heartbeats;
        #: below session.timeout.ms
        @property
        def heartbeat_interval_ms(self) -> int: ...
