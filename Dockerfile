# The seckill binary in a small image. Used by docker-compose.yml.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin seckill

FROM debian:bookworm-slim
RUN useradd --system --no-create-home seckill
COPY --from=build /src/target/release/seckill /usr/local/bin/seckill
USER seckill
EXPOSE 8080
ENTRYPOINT ["seckill"]
CMD ["serve"]
