# The seckill binaries (the app and its load test) in a small image. Used by docker-compose.yml.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p seckill --bin seckill --bin seckill-loadtest

FROM debian:bookworm-slim
RUN useradd --system --no-create-home seckill
COPY --from=build /src/target/release/seckill /src/target/release/seckill-loadtest /usr/local/bin/
USER seckill
EXPOSE 8080
ENTRYPOINT ["seckill"]
CMD ["serve"]
